//! Block Kit: options as buttons (a single choice) or a multi-select menu, an admin
//! notice as sections with its buttons, and the Stop button under a reply being written.
//! Action ids carry what a press answers ([`Press`], [`AdminAction`]).

use crate::interaction::Press;
use crate::markup::slack_mrkdwn;
use crate::split::truncate;
use kaiwa_core::admin::AdminNotice;
use kaiwa_core::message::OptionsRequest;
use serde_json::{Value, json};

/// Buttons one `actions` block holds.
const PER_BLOCK: usize = 25;
/// Options a static select menu holds.
const MAX_SELECT: usize = 100;
/// A button's text, a select option's text.
const LABEL: usize = 75;
/// A section's text.
pub const SECTION: usize = 3000;

/// The Stop button's action id.
pub const STOP_ID: &str = "kaiwa|stop";

fn plain(text: &str, max: usize) -> Value {
    json!({"type": "plain_text", "text": truncate(text, max), "emoji": true})
}

/// A section of the flows' light Markdown, as mrkdwn.
fn section(text: &str) -> Value {
    let text = truncate(&slack_mrkdwn(text), SECTION);
    json!({"type": "section", "text": {"type": "mrkdwn", "text": text}})
}

/// The blocks of an options request: its prompt, then buttons (single choice) or a
/// multi-select menu; `chosen`: the request answered, its prompt and the choice only.
pub fn options(request: &OptionsRequest, chosen: Option<&str>) -> Vec<Value> {
    if let Some(chosen) = chosen {
        return vec![section(chosen)];
    }
    let mut blocks = vec![section(&request.prompt)];
    if request.allow_multiple {
        let options: Vec<Value> = request
            .options
            .iter()
            .enumerate()
            .take(MAX_SELECT)
            .map(|(i, o)| json!({"text": plain(&o.label, LABEL), "value": i.to_string()}))
            .collect();
        let id = Press::Select {
            request_id: request.request_id.clone(),
        }
        .encode();
        blocks.push(json!({
            "type": "actions",
            "elements": [{
                "type": "multi_static_select",
                "action_id": id,
                "placeholder": plain("…", LABEL),
                "options": options,
            }],
        }));
        return blocks;
    }
    let buttons: Vec<Value> = request
        .options
        .iter()
        .enumerate()
        .map(|(index, o)| {
            let id = Press::Pick {
                request_id: request.request_id.clone(),
                index,
            }
            .encode();
            json!({"type": "button", "action_id": id, "text": plain(&o.label, LABEL), "value": index.to_string()})
        })
        .collect();
    for chunk in buttons.chunks(PER_BLOCK) {
        blocks.push(json!({"type": "actions", "elements": chunk}));
    }
    blocks
}

/// The Stop button under a reply being written.
pub fn stop(text: &str) -> Vec<Value> {
    let label = if kaiwa_core::i18n::has_japanese(text) {
        "停止"
    } else {
        "Stop"
    };
    vec![
        section(text),
        json!({"type": "actions", "elements": [
            {"type": "button", "action_id": STOP_ID, "text": plain(label, LABEL), "value": "stop"}
        ]}),
    ]
}

/// An admin notice: its title, its fields, its body and its buttons (labels in `language`).
pub fn notice(notice: &AdminNotice, language: &str) -> Vec<Value> {
    let mut blocks = vec![section(&format!("**[{}] {}**", notice.kind, notice.title))];
    let fields: Vec<Value> = notice
        .fields
        .iter()
        .take(10)
        .map(|(label, value)| {
            let text = slack_mrkdwn(&format!("**{label}**\n{value}"));
            json!({"type": "mrkdwn", "text": truncate(&text, 2000)})
        })
        .collect();
    if !fields.is_empty() {
        blocks.push(json!({"type": "section", "fields": fields}));
    }
    if !notice.body.trim().is_empty() {
        blocks.push(section(&notice.body));
    }
    let buttons: Vec<Value> = notice
        .buttons(language)
        .into_iter()
        .map(|(label, id)| json!({"type": "button", "action_id": id, "text": plain(label, LABEL), "value": "admin"}))
        .collect();
    if !buttons.is_empty() {
        blocks.push(json!({"type": "actions", "elements": buttons}));
    }
    blocks
}

/// A notice as plain text (the notification's and a screen reader's fallback).
pub fn notice_text(notice: &AdminNotice) -> String {
    truncate(
        &slack_mrkdwn(&format!("[{}] {}", notice.kind, notice.title)),
        300,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use kaiwa_core::message::OptionItem;

    #[test]
    fn thirty_options_are_two_button_blocks_and_multi_select_is_a_menu() {
        let items: Vec<OptionItem> = (0..30)
            .map(|i| OptionItem::new(format!("v{i}"), format!("Option {i}")))
            .collect();
        let mut single = OptionsRequest::new("Pick", items.clone(), false);
        single.request_id = "r1".into();
        let blocks = options(&single, None);
        assert_eq!(blocks.len(), 3);
        assert_eq!(blocks[1]["elements"].as_array().map(Vec::len), Some(25));
        assert_eq!(blocks[2]["elements"][4]["action_id"], "kaiwa|p|r1|29");
        let mut multi = OptionsRequest::new("Pick", items, true);
        multi.request_id = "r2".into();
        let blocks = options(&multi, None);
        assert_eq!(blocks[1]["elements"][0]["type"], "multi_static_select");
        assert_eq!(blocks[1]["elements"][0]["action_id"], "kaiwa|s|r2");
        let answered = options(&multi, Some("Pick\n\n✓ Option 1"));
        assert_eq!(answered.len(), 1, "an answered request keeps no buttons");
    }
}
