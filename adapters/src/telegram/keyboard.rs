//! Inline keyboards for [`OptionsRequest`]s and the callback data their buttons carry.
//!
//! Telegram allows 64 bytes of callback data, so a button never carries an option's value:
//! it carries the request's short id and the option's index, and the adapter maps the index
//! back through the request stored with the session. A multi-select keyboard keeps its
//! toggled choices in the buttons themselves (a bit mask in every button's data), so a
//! restart loses nothing and no extra table is needed.

use kaiwa_core::message::OptionsRequest;
use teloxide::types::{InlineKeyboardButton, InlineKeyboardMarkup};

/// What every callback data of Kaiwa's buttons starts with.
pub const NAMESPACE: &str = "kaiwa|";

/// At most this many options get a button (the mask is a `u64`).
pub const MAX_BUTTONS: usize = 64;

/// What a button press asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Press {
    /// A single-choice option.
    Pick { request_id: String, index: usize },
    /// Toggle one option of a multi-select keyboard whose current selection is `mask`.
    Toggle {
        request_id: String,
        index: usize,
        mask: u64,
    },
    /// Submit a multi-select keyboard's selection.
    Done { request_id: String, mask: u64 },
}

impl Press {
    pub fn request_id(&self) -> &str {
        match self {
            Press::Pick { request_id, .. }
            | Press::Toggle { request_id, .. }
            | Press::Done { request_id, .. } => request_id,
        }
    }

    /// The callback data (always ≤ 64 bytes for request ids of ≤ 24 characters), in
    /// Kaiwa's namespace ([`NAMESPACE`]) so that a host bot's own buttons and Kaiwa's never
    /// reach each other's handlers.
    pub fn encode(&self) -> String {
        match self {
            Press::Pick { request_id, index } => format!("{NAMESPACE}p|{request_id}|{index}"),
            Press::Toggle {
                request_id,
                index,
                mask,
            } => format!("{NAMESPACE}t|{request_id}|{index}|{mask:x}"),
            Press::Done { request_id, mask } => format!("{NAMESPACE}d|{request_id}|{mask:x}"),
        }
    }

    /// Parses callback data; `None` for anything this adapter did not produce.
    pub fn decode(data: &str) -> Option<Press> {
        Press::decode_unprefixed(data.strip_prefix(NAMESPACE)?)
    }

    /// Whether `data` is in Kaiwa's namespace (a press Kaiwa answers, stale or not).
    pub fn is_kaiwas(data: &str) -> bool {
        data.starts_with(NAMESPACE)
    }

    /// Callback data of keyboards sent before the namespace (`p|…`): read only when Kaiwa
    /// runs on its own, where no other handler's buttons exist.
    pub fn decode_legacy(data: &str) -> Option<Press> {
        Press::decode_unprefixed(data)
    }

    fn decode_unprefixed(data: &str) -> Option<Press> {
        let mut parts = data.split('|');
        let kind = parts.next()?;
        let request_id = parts.next()?.to_string();
        if request_id.is_empty() || request_id.len() > 24 {
            return None;
        }
        let index = |s: Option<&str>| s?.parse::<usize>().ok().filter(|i| *i < MAX_BUTTONS);
        let mask = |s: Option<&str>| u64::from_str_radix(s?, 16).ok();
        let press = match kind {
            "p" => Press::Pick {
                request_id,
                index: index(parts.next())?,
            },
            "t" => Press::Toggle {
                request_id,
                index: index(parts.next())?,
                mask: mask(parts.next())?,
            },
            "d" => Press::Done {
                request_id,
                mask: mask(parts.next())?,
            },
            _ => return None,
        };
        parts.next().is_none().then_some(press)
    }
}

/// The keyboard for a request; `mask` marks the toggled options of a multi-select.
pub fn keyboard(request: &OptionsRequest, mask: u64) -> InlineKeyboardMarkup {
    let options = request.options.iter().take(MAX_BUTTONS).enumerate();
    let short = request
        .options
        .iter()
        .all(|o| o.label.chars().count() <= 14);
    let per_row = if short && !request.allow_multiple {
        3
    } else {
        1
    };
    let buttons: Vec<InlineKeyboardButton> = options
        .map(|(index, option)| {
            let request_id = request.request_id.clone();
            if request.allow_multiple {
                let on = mask & (1 << index) != 0;
                let label = format!("{} {}", if on { "☑" } else { "☐" }, option.label);
                let press = Press::Toggle {
                    request_id,
                    index,
                    mask,
                };
                InlineKeyboardButton::callback(label, press.encode())
            } else {
                let press = Press::Pick { request_id, index };
                InlineKeyboardButton::callback(option.label.clone(), press.encode())
            }
        })
        .collect();
    let mut rows: Vec<Vec<InlineKeyboardButton>> =
        buttons.chunks(per_row).map(<[_]>::to_vec).collect();
    if request.allow_multiple {
        let done = Press::Done {
            request_id: request.request_id.clone(),
            mask,
        };
        rows.push(vec![InlineKeyboardButton::callback(
            "Done ✓ / 決定",
            done.encode(),
        )]);
    }
    InlineKeyboardMarkup::new(rows)
}

/// The values of the options selected by `mask`, in the request's order.
pub fn values_of(request: &OptionsRequest, mask: u64) -> Vec<String> {
    request
        .options
        .iter()
        .take(MAX_BUTTONS)
        .enumerate()
        .filter(|(i, _)| mask & (1 << i) != 0)
        .map(|(_, o)| o.value.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use kaiwa_core::message::OptionItem;

    fn request(multiple: bool) -> OptionsRequest {
        OptionsRequest::new(
            "Pick",
            (0..5)
                .map(|i| OptionItem::new(format!("value-{i}-{}", "x".repeat(80)), format!("L{i}")))
                .collect(),
            multiple,
        )
    }

    #[test]
    fn callback_data_round_trips_and_fits_64_bytes() {
        let presses = [
            Press::Pick {
                request_id: "0123456789ab".into(),
                index: 63,
            },
            Press::Toggle {
                request_id: "0123456789ab".into(),
                index: 7,
                mask: u64::MAX,
            },
            Press::Done {
                request_id: "0123456789ab".into(),
                mask: u64::MAX,
            },
        ];
        for press in presses {
            let data = press.encode();
            assert!(data.len() <= 64, "{data}");
            assert_eq!(Press::decode(&data), Some(press));
        }
    }

    #[test]
    fn foreign_or_malformed_data_is_refused() {
        for data in [
            "",
            "x|abc|1",
            "p||1",
            "p|abc|99",
            "t|abc|1",
            "d|abc|zz",
            "p|abc|1|2",
            "kaiwa|p|abc|99",
            "kaiwa|x|abc|1",
            "other|p|abc|1",
        ] {
            assert_eq!(Press::decode(data), None, "{data}");
        }
        // a host's data that happens to look like Kaiwa's before the namespace
        assert_eq!(Press::decode("p|abc|1"), None);
        let pick = Press::Pick {
            request_id: "abc".into(),
            index: 1,
        };
        assert_eq!(Press::decode_legacy("p|abc|1"), Some(pick.clone()));
        assert_eq!(Press::decode("kaiwa|p|abc|1"), Some(pick));
        assert!(Press::is_kaiwas("kaiwa|p|zzz"));
        assert!(!Press::is_kaiwas("again"));
    }

    #[test]
    fn multi_select_marks_toggled_options_and_adds_done() {
        let req = request(true);
        let markup = keyboard(&req, 0b101);
        let labels: Vec<&str> = markup
            .inline_keyboard
            .iter()
            .flatten()
            .map(|b| b.text.as_str())
            .collect();
        assert_eq!(
            labels,
            ["☑ L0", "☐ L1", "☑ L2", "☐ L3", "☐ L4", "Done ✓ / 決定"]
        );
        assert_eq!(
            values_of(&req, 0b101),
            vec![req.options[0].value.clone(), req.options[2].value.clone()]
        );
    }

    #[test]
    fn short_single_choice_labels_share_rows() {
        let markup = keyboard(&request(false), 0);
        assert_eq!(markup.inline_keyboard.len(), 2);
        assert_eq!(markup.inline_keyboard[0].len(), 3);
    }
}
