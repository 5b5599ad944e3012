//! `kaiwa check --online`: each service the configuration names (the database, Telegram,
//! Discord, Slack, the model server) called once, a line each with its fix.

use anyhow::bail;
use kaiwa::app;
use kaiwa::config::Settings;

/// `kaiwa check --online`: each thing the configuration names, called once, a line each
/// (`ok` or what to fix); an error when anything failed. Secrets are never printed.
pub async fn check_online(settings: &Settings, database_url: &str) -> anyhow::Result<()> {
    let mut failed: Vec<&str> = Vec::new();
    let mut line = |what: &'static str, outcome: Result<String, String>| match outcome {
        Ok(fine) => say!("online {what}: ok, {fine}"),
        Err(fix) => {
            say!("online {what}: FAILED, {fix}");
            failed.push(what);
        }
    };
    // the database: a write
    let database = match app::open_store(database_url).await {
        Ok(store) => {
            let written = store.check_writable().await;
            store.close().await;
            written
                .map(|()| format!("{} takes writes", app::redact_url(database_url)))
                .map_err(|e| format!("{} cannot be written ({e})", app::redact_url(database_url)))
        }
        Err(e) => Err(format!("{e:#}")),
    };
    line("database", database);
    let tg = &settings.telegram;
    match kaiwa::config::optional_secret(&tg.token_env) {
        None => say!("online telegram: skipped ({} is not set)", tg.token_env),
        Some(token) => {
            let api = kaiwa_adapters::telegram::TelegramApi::new(&token, tg.api_url.as_deref())?;
            match api.get_me().await {
                Ok(me) => {
                    line("telegram", Ok(format!("the token is @{}'s", me.username())));
                    if let Some(chat) = tg.admin_chat_id {
                        line(
                            "telegram admin chat",
                            api.admin_chat_rights(chat, me.id.0).await,
                        );
                    }
                }
                Err(e) => line(
                    "telegram",
                    Err(format!(
                        "Telegram refused the token in {} ({e}): copy it again from @BotFather",
                        tg.token_env
                    )),
                ),
            }
        }
    }
    let dc = &settings.discord;
    match kaiwa::config::optional_secret(&dc.token_env) {
        None => say!("online discord: skipped ({} is not set)", dc.token_env),
        Some(token) => {
            match kaiwa_adapters::discord::application(&token, dc.api_proxy.as_deref()).await {
                Ok(app) => {
                    line(
                        "discord",
                        Ok(format!(
                            "the token is application {}'s ({})",
                            app.name, app.id
                        )),
                    );
                    // GATEWAY_MESSAGE_CONTENT or its limited form (unverified bots)
                    let flags = app.flags.map(|f| f.bits()).unwrap_or_default();
                    line(
                        "discord intent",
                        if flags & ((1 << 18) | (1 << 19)) != 0 {
                            Ok("the Message Content intent is on".into())
                        } else {
                            Err("the Message Content intent is off: turn it on in the Developer Portal (your application → Bot → Privileged Gateway Intents → Message Content Intent)".into())
                        },
                    );
                }
                Err(e) => line(
                    "discord",
                    Err(format!(
                        "{e}: copy the bot token again into {}",
                        dc.token_env
                    )),
                ),
            }
        }
    }
    let sl = &settings.slack;
    match kaiwa::config::optional_secret(&sl.bot_token_env) {
        None => say!("online slack: skipped ({} is not set)", sl.bot_token_env),
        Some(token) => {
            let app = kaiwa::config::optional_secret(&sl.app_token_env);
            let api =
                kaiwa_adapters::slack::SlackApi::new(&token, app.as_deref(), sl.api_url.as_deref())
                    .map_err(anyhow::Error::msg)?;
            for (what, outcome) in slack_checks(&api, sl, app.is_some()).await {
                line(what, outcome);
            }
        }
    }
    if let Some(llm) = &settings.llm {
        line("model", model_answers(llm).await);
    } else {
        say!("online model: skipped (no [llm]; the agents use their rule-based floors)");
    }
    if failed.is_empty() {
        Ok(())
    } else {
        bail!("online checks failed: {}", failed.join(", "))
    }
}

/// The scopes Kaiwa's Slack app needs (the README's manifest asks for them).
pub const SLACK_SCOPES: [&str; 5] = [
    "chat:write",
    "im:history",
    "channels:history",
    "groups:history",
    "commands",
];

/// `kaiwa check --online` for Slack: the bot token (and its scopes), the transport's
/// secret (Socket Mode's app-level token, or the Events API's signing secret) and the
/// admin channel's membership, each with its fix.
async fn slack_checks(
    api: &kaiwa_adapters::slack::SlackApi,
    sl: &kaiwa::config::SlackSettings,
    has_app_token: bool,
) -> Vec<(&'static str, Result<String, String>)> {
    let mut checks = Vec::new();
    let (me, headers) = match api.call_form("auth.test", &[]).await {
        Ok(answer) => answer,
        Err(e) => {
            checks.push((
                "slack",
                Err(format!(
                    "{e}: copy the Bot User OAuth Token (xoxb-…) from the app's OAuth & \
                     Permissions page into {}",
                    sl.bot_token_env
                )),
            ));
            return checks;
        }
    };
    let field = |name: &str| {
        me.get(name)
            .and_then(|v| v.as_str())
            .unwrap_or("?")
            .to_string()
    };
    checks.push((
        "slack",
        Ok(format!(
            "the token is {}'s in {}",
            field("user"),
            field("team")
        )),
    ));
    let granted: Vec<String> = headers
        .get("x-oauth-scopes")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .split(',')
        .map(|s| s.trim().to_string())
        .collect();
    let missing: Vec<&str> = SLACK_SCOPES
        .into_iter()
        .filter(|s| !granted.iter().any(|g| g == s))
        .collect();
    checks.push((
        "slack scopes",
        if missing.is_empty() {
            Ok(format!("{} granted", SLACK_SCOPES.join(", ")))
        } else {
            Err(format!(
                "missing {}: add them under OAuth & Permissions → Bot Token Scopes (or paste \
                 the README's manifest), then reinstall the app",
                missing.join(", ")
            ))
        },
    ));
    if sl.events_listen.is_some() {
        checks.push((
            "slack events",
            if kaiwa::config::optional_secret(&sl.signing_secret_env).is_some() {
                Ok(format!(
                    "the signing secret is in {}",
                    sl.signing_secret_env
                ))
            } else {
                Err(format!(
                    "set {} to the app's Signing Secret (Basic Information → App Credentials)",
                    sl.signing_secret_env
                ))
            },
        ));
    } else if !has_app_token {
        checks.push((
            "slack socket",
            Err(format!(
                "set {} to an app-level token with connections:write (Basic Information → \
                 App-Level Tokens), or set [slack] events_listen for the Events API",
                sl.app_token_env
            )),
        ));
    } else {
        checks.push((
            "slack socket",
            api.open_socket()
                .await
                .map(|_| "Socket Mode hands out a connection".to_string())
                .map_err(|e| {
                    format!(
                        "{e}: turn Socket Mode on (Settings → Socket Mode) and check the \
                         app-level token in {}",
                        sl.app_token_env
                    )
                }),
        ));
    }
    if let Some(channel) = &sl.admin_channel_id {
        let member = api
            .call_form("conversations.info", &[("channel", channel)])
            .await;
        checks.push((
            "slack admin channel",
            match member {
                Ok((answer, _)) if answer["channel"]["is_member"].as_bool() == Some(true) => {
                    Ok(format!("the bot is in {channel}"))
                }
                Ok(_) => Err(format!(
                    "the bot is not in {channel}: type /invite @your-bot in that channel"
                )),
                Err(e) => Err(format!(
                    "{e}: check [slack] admin_channel_id (the channel's id, C…, from its \
                     details) and invite the bot there"
                )),
            },
        ));
    }
    checks
}

/// The model server lists its models and answers a tiny completion with a tool.
async fn model_answers(llm: &kaiwa::config::LlmSettings) -> Result<String, String> {
    let base = llm.base_url.trim_end_matches('/');
    let key = match &llm.api_key_env {
        Some(var) => Some(kaiwa::config::secret_from_env(var).map_err(|e| format!("{e}"))?),
        None => None,
    };
    let client = reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(llm.timeout_secs.min(30)))
        .build()
        .map_err(|e| e.to_string())?;
    let with_key = |request: reqwest::RequestBuilder| match &key {
        Some(key) => request.bearer_auth(key),
        None => request,
    };
    let down = |e: reqwest::Error| {
        format!(
            "the model server at {base} does not answer ({}): start it, or fix [llm] base_url",
            e.without_url()
        )
    };
    let listed = with_key(client.get(format!("{base}/models")))
        .send()
        .await
        .map_err(down)?;
    if listed.status() == reqwest::StatusCode::UNAUTHORIZED {
        return Err("the model server refused the API key: check [llm] api_key_env".into());
    }
    let models: serde_json::Value = listed.json().await.unwrap_or_default();
    let known = models["data"]
        .as_array()
        .is_some_and(|list| list.iter().any(|m| m["id"] == llm.model.as_str()));
    let tiny = serde_json::json!({
        "model": llm.model,
        "messages": [{"role": "user", "content": "Reply with ok."}],
        "max_tokens": 8,
        "tools": [{"type": "function", "function": {"name": "ok", "description": "Say ok.",
                   "parameters": {"type": "object", "properties": {}}}}],
    });
    let answered = with_key(client.post(format!("{base}/chat/completions")))
        .json(&tiny)
        .send()
        .await
        .map_err(down)?;
    let status = answered.status();
    if !status.is_success() {
        return Err(format!(
            "the model server answered {status} to a tiny completion with a tool: check [llm] model ({})",
            llm.model
        ));
    }
    Ok(format!(
        "{base} answers{}",
        if known {
            format!(" and lists {}", llm.model)
        } else {
            format!(" ({} not in its list)", llm.model)
        }
    ))
}
