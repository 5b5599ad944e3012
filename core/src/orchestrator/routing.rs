//! Routing: what an incoming message means for the session of its place ([`Plan`]) — a
//! new session, a turn of the active one, a generic command (`/start`, `/help`, `/end`), a
//! flow's start command, a press on the pending options, or a stale press. Called by the
//! turn in `mod.rs`.

use super::Orchestrator;
use super::OrchestratorError;
use super::notices::STALE_EN;
use crate::flow::TurnInput;
use crate::i18n::pick;
use crate::message::{Body, Incoming, OptionsRequest, SessionKey};
use crate::store::SessionRecord;

pub(super) enum Plan {
    /// Run the flow.
    Turn {
        session: SessionRecord,
        finish_session: Option<i64>,
        input: TurnInput,
    },
    /// Answer without running a flow.
    Reply {
        session: Option<SessionRecord>,
        text: String,
    },
}

impl Orchestrator {
    /// The options pending in `key`'s session if a press carrying `request_id` answers
    /// them (else `None`: a stale or foreign press). What an adapter needs to read a press
    /// (which button, which labels) without reading the store itself.
    pub(crate) async fn pending_options(
        &self,
        key: &SessionKey,
        request_id: &str,
    ) -> Result<Option<OptionsRequest>, OrchestratorError> {
        let session = self.store.active_session(key).await?;
        Ok(answered_options(session.as_ref(), request_id))
    }

    /// Decides what an incoming message means for the session of its place. `lang`: the
    /// language of a reply without a turn ([`super::language::reply_language`]).
    pub(super) fn plan(
        &self,
        incoming: &Incoming,
        active: Option<SessionRecord>,
        lang: &str,
    ) -> Result<Plan, OrchestratorError> {
        let key = incoming.key();
        // the flow the place asks for (its configured flow), else the default one
        let requested = incoming
            .flow
            .as_deref()
            .filter(|f| self.flows.get(f).is_some())
            .unwrap_or(self.flows.default_flow())
            .to_string();
        Ok(match &incoming.body {
            Body::Open => plan_open(key, incoming.flow.as_deref(), &requested, active),
            Body::Command { name, args } => {
                self.plan_command(key, (name, args), &requested, active, lang)
            }
            Body::Text { text } => {
                let input = match typed_option(active.as_ref(), text) {
                    Some((request, value)) => TurnInput::Choice {
                        request,
                        values: vec![value],
                    },
                    None => TurnInput::Text(text.clone()),
                };
                Plan::Turn {
                    session: active.unwrap_or_else(|| SessionRecord::draft(key, &requested)),
                    finish_session: None,
                    input,
                }
            }
            Body::Choice { request_id, values } => plan_choice(request_id, values, active, lang),
        })
    }

    /// A command: `/start`, `/help`, `/end` (`/cancel`), a flow's start command, or one
    /// for the session's flow.
    fn plan_command(
        &self,
        key: SessionKey,
        (name, args): (&str, &str),
        requested: &str,
        active: Option<SessionRecord>,
        lang: &str,
    ) -> Plan {
        match name {
            "start" => {
                let flow = active.as_ref().map_or(requested, |s| s.flow.as_str());
                fresh(key, flow, &active, TurnInput::Start)
            }
            "help" => Plan::Reply {
                text: self.help_text(active.as_ref(), lang),
                session: active,
            },
            "end" | "cancel" => match active {
                Some(session) => Plan::Turn {
                    session,
                    finish_session: None,
                    input: TurnInput::Command {
                        name: "end".into(),
                        args: args.to_string(),
                    },
                },
                None => Plan::Reply {
                    session: None,
                    text: pick(
                        lang,
                        "There is no conversation in progress. Send /start to begin one.",
                        "進行中の会話はありません。/start で始められます。",
                    ),
                },
            },
            other => match (self.flows.by_start_command(other), active) {
                (Some(flow), active) => fresh(key, flow.id(), &active, TurnInput::Start),
                (None, Some(session)) => Plan::Turn {
                    session,
                    finish_session: None,
                    input: TurnInput::Command {
                        name: other.to_string(),
                        args: args.to_string(),
                    },
                },
                (None, None) => Plan::Reply {
                    session: None,
                    text: self.unknown_command_text(other, lang),
                },
            },
        }
    }
}

/// A new session of `flow` in the place, replacing `active` (finished with the turn).
fn fresh(key: SessionKey, flow: &str, active: &Option<SessionRecord>, input: TurnInput) -> Plan {
    Plan::Turn {
        session: SessionRecord::draft(key, flow),
        finish_session: active.as_ref().map(|s| s.id),
        input,
    }
}

/// The place opened (a console chat started, a DM opened): the session goes on, or a new
/// one starts. Opening a place for another flow (`kaiwa chat mentor` after `chat reading`)
/// finishes the old session and starts the requested one.
fn plan_open(
    key: SessionKey,
    asked: Option<&str>,
    requested: &str,
    active: Option<SessionRecord>,
) -> Plan {
    match active {
        Some(session) if asked.is_some_and(|f| f == requested && f != session.flow) => {
            fresh(key, requested, &Some(session), TurnInput::Start)
        }
        Some(session) => Plan::Turn {
            session,
            finish_session: None,
            input: TurnInput::Resume,
        },
        None => Plan::Turn {
            session: SessionRecord::draft(key, requested),
            finish_session: None,
            input: TurnInput::Start,
        },
    }
}

/// A press: a turn when it answers the pending options with values among them; a stale
/// press (other options, or none pending) or a value not offered is answered instead.
fn plan_choice(
    request_id: &str,
    values: &[String],
    active: Option<SessionRecord>,
    lang: &str,
) -> Plan {
    let pending = answered_options(active.as_ref(), request_id);
    let (session, request) = match (active, pending) {
        (Some(session), Some(request)) => (session, request),
        (session, _) => {
            return Plan::Reply {
                text: pick(
                    lang,
                    STALE_EN,
                    "このボタンはもう使えません。最新のメッセージに答えてください。",
                ),
                session,
            };
        }
    };
    let known: Vec<String> = values
        .iter()
        .filter(|v| request.options.iter().any(|o| &o.value == *v))
        .cloned()
        .collect();
    if known.is_empty()
        || known.len() != values.len()
        || (!request.allow_multiple && known.len() > 1)
    {
        return Plan::Reply {
            text: pick(
                lang,
                "That choice is not one of the options. Please pick again.",
                "その選択肢はありません。もう一度お選びください。",
            ),
            session: Some(session),
        };
    }
    Plan::Turn {
        session,
        finish_session: None,
        input: TurnInput::Choice {
            request,
            values: known,
        },
    }
}

/// The pending options and the value of the one whose label `text` is, as typed instead of
/// pressed ("english", "Solved."): case, spaces and closing punctuation aside; on a
/// confirmation's keyboard, a typed yes or no too. One choice only: a typed label never
/// submits a multiple choice.
pub(super) fn typed_option(
    session: Option<&SessionRecord>,
    text: &str,
) -> Option<(OptionsRequest, String)> {
    let pending = session?.pending_options.as_ref()?;
    if pending.allow_multiple {
        return None;
    }
    let fold = |s: &str| {
        s.trim()
            .trim_end_matches(['.', '!', '。', '！', '．'])
            .trim()
            .to_lowercase()
    };
    let typed = fold(text);
    if typed.is_empty() {
        return None;
    }
    if let Some(option) = pending.options.iter().find(|o| fold(&o.label) == typed) {
        return Some((pending.clone(), option.value.clone()));
    }
    // a confirmation's keyboard (/forget's, its values `…:yes` and `…:no`): a typed yes
    // or no is its press
    let suffix = match typed.as_str() {
        "yes" | "y" | "yeah" | "yep" | "ok" | "okay" | "sure" | "はい" | "うん" | "ええ" => {
            ":yes"
        }
        "no" | "n" | "nope" | "cancel" | "stop" | "いいえ" | "いや" | "やめる" | "やめます"
        | "キャンセル" | "しない" => ":no",
        _ => return None,
    };
    let option = pending.options.iter().find(|o| o.value.ends_with(suffix))?;
    Some((pending.clone(), option.value.clone()))
}

/// The session's pending options if a press carrying `request_id` answers them: the one
/// test of a stale or foreign press, for the orchestrator's routing and the adapters alike.
fn answered_options(session: Option<&SessionRecord>, request_id: &str) -> Option<OptionsRequest> {
    session
        .and_then(|s| s.pending_options.as_ref())
        .filter(|p| p.request_id == request_id)
        .cloned()
}
