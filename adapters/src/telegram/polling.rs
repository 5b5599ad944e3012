//! Long polling read one update at a time: a `getUpdates` batch is taken apart into its
//! updates before any is parsed, so one update the adapter cannot read (a text cut inside
//! an emoji, a shape teloxide does not know) is skipped, logged by its id only, and the
//! offset still moves past it. A lone UTF-16 surrogate (`\ud83d` without its pair) is
//! replaced with U+FFFD and the update read again, so the message is still answered.

use super::api::{CallError, TelegramApi};
use serde::Deserialize;
use serde_json::value::RawValue;
use std::time::Duration;
use teloxide::types::Update;

/// The updates Kaiwa asks for, polling or as a webhook.
pub(super) const ALLOWED_UPDATES: [&str; 3] =
    ["message", "callback_query", "stopped_message_generation"];

/// What a poll brought: the updates that could be read, and the offset that confirms the
/// whole batch (those skipped too).
pub(super) struct Batch {
    pub(super) updates: Vec<Update>,
    /// Stops of streamed replies (`stopped_message_generation`, Bot API 10.3, which
    /// teloxide does not know): chat and draft id.
    pub(super) stops: Vec<(i64, i64)>,
    pub(super) next_offset: Option<i64>,
}

/// One `getUpdates` long poll from `offset`, waiting up to `timeout` for updates.
pub(super) async fn poll(
    api: &TelegramApi,
    offset: Option<i64>,
    timeout: Duration,
) -> Result<Batch, CallError> {
    let mut params = serde_json::json!({
        "timeout": timeout.as_secs(),
        "allowed_updates": ALLOWED_UPDATES,
    });
    if let Some(offset) = offset {
        params["offset"] = offset.into();
    }
    // the client's own timeout is shorter than a long poll may take
    let raw: Vec<Box<RawValue>> = api
        .request(
            "getUpdates",
            &params,
            Some(timeout + Duration::from_secs(10)),
        )
        .await?;
    Ok(read_batch(&raw))
}

/// Confirms every update before `offset` (asks for none: `limit` 1, no wait).
pub(super) async fn confirm(api: &TelegramApi, offset: i64) {
    let params = serde_json::json!({"offset": offset, "limit": 1, "timeout": 0});
    let confirmed: Result<serde::de::IgnoredAny, CallError> =
        api.request("getUpdates", &params, None).await;
    if let Err(e) = confirmed {
        tracing::debug!(error = %e, "could not confirm the last batch");
    }
}

#[derive(Deserialize)]
struct UpdateId {
    update_id: i64,
}

#[derive(Deserialize)]
struct StopUpdate {
    stopped_message_generation: Stopped,
}

#[derive(Deserialize)]
struct Stopped {
    chat: StoppedChat,
    draft_id: i64,
}

#[derive(Deserialize)]
struct StoppedChat {
    id: i64,
}

/// The chat and draft of a `stopped_message_generation` update, as a host's dispatcher
/// hands it over (teloxide reads it as an update of no known kind and keeps its JSON).
pub(super) fn stop_of(update: &serde_json::Value) -> Option<(i64, i64)> {
    let stop = StopUpdate::deserialize(update).ok()?;
    let s = stop.stopped_message_generation;
    Some((s.chat.id, s.draft_id))
}

pub(super) fn read_batch(raw: &[Box<RawValue>]) -> Batch {
    let mut updates = Vec::with_capacity(raw.len());
    let mut stops = Vec::new();
    let mut last = None;
    for value in raw {
        let text = value.get();
        let id = serde_json::from_str::<UpdateId>(text)
            .ok()
            .map(|u| u.update_id);
        last = last.max(id);
        if let Ok(stop) = serde_json::from_str::<StopUpdate>(text) {
            let s = stop.stopped_message_generation;
            stops.push((s.chat.id, s.draft_id));
            continue;
        }
        let parsed = serde_json::from_str::<Update>(text).or_else(|first| {
            let repaired = repair_surrogates(text);
            if repaired == text {
                return Err(first);
            }
            tracing::info!(
                update = ?id,
                "an update with a broken character; read with U+FFFD in its place"
            );
            serde_json::from_str::<Update>(&repaired)
        });
        match parsed {
            Ok(update) => updates.push(update),
            // the error's kind and place only: its message may quote the user's text
            Err(e) => tracing::warn!(
                update = ?id,
                error = ?e.classify(),
                column = e.column(),
                "skipped a Telegram update that could not be read"
            ),
        }
    }
    Batch {
        updates,
        stops,
        next_offset: last.map(|id| id + 1),
    }
}

/// Replaces `\uXXXX` escapes of unpaired UTF-16 surrogates with `\ufffd`.
pub(super) fn repair_surrogates(json: &str) -> String {
    let bytes = json.as_bytes();
    let hex_at = |i: usize| -> Option<u16> {
        let digits = json.get(i..i + 4)?;
        u16::from_str_radix(digits, 16).ok()
    };
    let escape_at = |i: usize| -> Option<u16> {
        (bytes.get(i) == Some(&b'\\') && bytes.get(i + 1) == Some(&b'u'))
            .then(|| hex_at(i + 2))
            .flatten()
    };
    let mut out = String::with_capacity(json.len());
    let mut i = 0;
    let mut copied = 0;
    while i < bytes.len() {
        if bytes[i] != b'\\' {
            i += 1;
            continue;
        }
        let Some(unit) = escape_at(i) else {
            // another escape (`\\`, `\"` …): skip the escaped character too
            i += 2;
            continue;
        };
        let high = (0xD800..0xDC00).contains(&unit);
        let low = (0xDC00..0xE000).contains(&unit);
        if high && escape_at(i + 6).is_some_and(|next| (0xDC00..0xE000).contains(&next)) {
            // a pair: both halves stay
            i += 12;
        } else if high || low {
            out.push_str(&json[copied..i]);
            out.push_str("\\ufffd");
            i += 6;
            copied = i;
        } else {
            i += 6;
        }
    }
    out.push_str(&json[copied..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(json: &str) -> Vec<Box<RawValue>> {
        serde_json::from_str(json).expect("a JSON array")
    }

    fn message(id: i64, text: &str) -> String {
        format!(
            r#"{{"update_id":{id},"message":{{"message_id":{id},"date":1,"chat":{{"id":5,"type":"private","first_name":"A"}},"from":{{"id":5,"is_bot":false,"first_name":"A"}},"text":"{text}"}}}}"#
        )
    }

    #[test]
    fn a_lone_surrogate_is_replaced_and_its_message_kept() {
        let batch = raw(&format!(
            "[{},{},{}]",
            message(7, "fine"),
            message(8, "cut \\ud83d"),
            message(9, "pair \\ud83d\\ude00 and \\\\ud83d literal")
        ));
        let read = read_batch(&batch);
        assert_eq!(read.next_offset, Some(10));
        let texts: Vec<String> = read
            .updates
            .iter()
            .map(|u| match &u.kind {
                teloxide::types::UpdateKind::Message(m) => m.text().unwrap_or("").to_string(),
                _ => String::new(),
            })
            .collect();
        assert_eq!(
            texts,
            ["fine", "cut \u{fffd}", "pair 😀 and \\ud83d literal"]
        );
    }

    #[test]
    fn an_update_that_cannot_be_read_is_skipped_and_the_offset_moves_past_it() {
        let batch = raw(&format!(
            r#"[{},{{"update_id":12,"message":{{"message_id":"not a number"}}}},{}]"#,
            message(11, "one"),
            message(13, "three")
        ));
        let read = read_batch(&batch);
        // teloxide reads a message it does not understand as an update of no known kind
        let messages = read
            .updates
            .iter()
            .filter(|u| matches!(u.kind, teloxide::types::UpdateKind::Message(_)))
            .count();
        assert_eq!(messages, 2);
        assert_eq!(read.next_offset, Some(14));
    }

    #[test]
    fn surrogate_repair_leaves_other_text_alone() {
        assert_eq!(repair_surrogates(r#""a\u00e9\n""#), r#""a\u00e9\n""#);
        assert_eq!(repair_surrogates(r#""\udc00x""#), r#""\ufffdx""#);
        assert_eq!(repair_surrogates(r#""x\ud800""#), r#""x\ufffd""#);
        assert_eq!(repair_surrogates("\"日本\\ud83d\""), "\"日本\\ufffd\"");
    }
}
