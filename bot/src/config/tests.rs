//! The configuration's tests: the reference in docs/configuration.md against the types,
//! defaults, and what validation refuses.

/// Every key of the configuration, dotted (`telegram.admin_chat_id`, list items as
/// `telegram.places[].chat`, map entries as `llm.agents.NAME.model`), from its types.
fn keys_of_the_types() -> Vec<String> {
    fn resolve<'a>(
        root: &'a serde_json::Value,
        schema: &'a serde_json::Value,
    ) -> &'a serde_json::Value {
        if let Some(r) = schema.get("$ref").and_then(|r| r.as_str()) {
            let name = r.rsplit('/').next().unwrap_or_default();
            return &root["$defs"][name];
        }
        for union in ["anyOf", "oneOf", "allOf"] {
            if let Some(first) = schema[union].as_array().and_then(|all| {
                all.iter()
                    .find(|s| s.get("$ref").is_some() || s.get("properties").is_some())
            }) {
                return resolve(root, first);
            }
        }
        schema
    }
    fn walk(
        root: &serde_json::Value,
        schema: &serde_json::Value,
        prefix: &str,
        out: &mut Vec<String>,
    ) {
        let schema = resolve(root, schema);
        let Some(properties) = schema["properties"].as_object() else {
            return;
        };
        for (name, property) in properties {
            let key = format!("{prefix}{name}");
            let inner = resolve(root, property);
            if inner["properties"].is_object() {
                walk(root, inner, &format!("{key}."), out);
            } else if let Some(items) = inner
                .get("items")
                .filter(|i| resolve(root, i)["properties"].is_object())
            {
                walk(root, items, &format!("{key}[]."), out);
            } else if let Some(values) = inner
                .get("additionalProperties")
                .filter(|v| resolve(root, v)["properties"].is_object())
            {
                walk(root, values, &format!("{key}.NAME."), out);
            } else {
                out.push(key);
            }
        }
    }
    let schema = serde_json::to_value(schemars::schema_for!(Settings)).unwrap_or_default();
    let mut out = Vec::new();
    walk(&schema, &schema, "", &mut out);
    out.sort();
    out
}

#[test]
fn the_configuration_reference_names_every_key_and_nothing_else() {
    let doc = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../docs/configuration.md"
    ))
    .unwrap_or_default();
    // the keys are the first cell of the tables' rows: | `telegram.admin_chat_id` | …
    let mut documented: Vec<String> = doc
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split('`').next())
        .map(str::to_string)
        .collect();
    documented.sort();
    let types = keys_of_the_types();
    let missing: Vec<&String> = types.iter().filter(|k| !documented.contains(k)).collect();
    let extra: Vec<&String> = documented.iter().filter(|k| !types.contains(k)).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "docs/configuration.md is out of date: missing {missing:?}, not keys {extra:?}"
    );
}

use super::*;

#[test]
fn defaults_apply_without_a_file() {
    let s = Settings::load(Path::new("/nonexistent/kaiwa.toml"), false).expect("defaults");
    assert_eq!(s.database_url, DEFAULT_DATABASE_URL);
    assert!(s.llm.is_none());
    assert!(Settings::load(Path::new("/nonexistent/kaiwa.toml"), true).is_err());
}

#[test]
fn llm_section_and_agent_overrides_parse() {
    let s: Settings = toml::from_str(
        r#"
        [llm]
        base_url = "http://127.0.0.1:11434/v1"
        model = "big"
        [llm.agents.quick_check]
        model = "small"
        turn_budget_secs = 4
        "#,
    )
    .expect("parses");
    let llm = s.llm.clone().expect("llm");
    assert_eq!(llm.timeout_secs, 60);
    assert_eq!(llm.agents["quick_check"].model.as_deref(), Some("small"));
    assert_eq!(llm.agents["quick_check"].turn_budget_secs, Some(4));
    assert!(s.validate().is_ok());
    let mut zero = s;
    if let Some(llm) = zero.llm.as_mut()
        && let Some(agent) = llm.agents.get_mut("quick_check")
    {
        agent.turn_budget_secs = Some(0);
    }
    let err = zero.validate().expect_err("a zero budget is refused");
    assert!(
        err.to_string().contains("[llm.agents.quick_check]"),
        "{err}"
    );
}

#[test]
fn an_embeddings_model_is_named_and_served_over_http() {
    let parse = |extra: &str| -> Settings {
        toml::from_str(&format!(
            "[llm]\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel = \"big\"\n{extra}"
        ))
        .expect("parses")
    };
    let s = parse("embeddings_model = \"nomic-embed-text\"");
    assert!(s.validate().is_ok());
    let llm = s.llm.expect("llm");
    assert_eq!(llm.embeddings_model.as_deref(), Some("nomic-embed-text"));
    assert_eq!(
        llm.embeddings_base_url, None,
        "the chat server's by default"
    );
    for (extra, says) in [
        ("embeddings_model = \" \"", "embeddings_model is empty"),
        (
            "embeddings_model = \"e\"\nembeddings_base_url = \"localhost:1\"",
            "embeddings_base_url must start",
        ),
    ] {
        let err = parse(extra).validate().expect_err(extra);
        assert!(err.to_string().contains(says), "{err}");
    }
}

#[test]
fn the_console_section_is_checked_and_links_start_at_its_address() {
    let s: Settings = toml::from_str("[console]\nlisten = \"127.0.0.1:0\"").expect("parses");
    assert!(s.validate().is_ok());
    let bound: std::net::SocketAddr = "127.0.0.1:8090".parse().expect("address");
    assert_eq!(s.console.public_url(bound), "http://127.0.0.1:8090");
    assert_eq!(
        s.console.session(),
        std::time::Duration::from_secs(12 * 3600)
    );
    let behind: Settings = toml::from_str(
        "[console]\nlisten = \"0.0.0.0:8090\"\npublic_url = \"https://kaiwa.example.com/\"",
    )
    .expect("parses");
    assert_eq!(
        behind.console.public_url(bound),
        "https://kaiwa.example.com"
    );
    for bad in [
        "public_url = \"kaiwa.example.com\"",
        "session_hours = 0",
        "session_hours = -3.5",
    ] {
        let s: Settings = toml::from_str(&format!("[console]\n{bad}")).expect("parses");
        let err = s.validate().expect_err(bad);
        assert!(err.to_string().contains("[console]"), "{err}");
    }
}

#[test]
fn typos_are_rejected() {
    assert!(toml::from_str::<Settings>("databse_url = \"x\"").is_err());
}
