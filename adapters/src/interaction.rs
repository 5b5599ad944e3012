//! What both chat adapters do the same way with a button press and with the notices they
//! send on their own: a press is read against the options the orchestrator says are
//! pending ([`pending_request`]; adapters never read the store), turned into the values it
//! chose ([`chosen_values`]), and the message it came from is shown with the choice
//! ([`shown_choice`]); a Discord or Slack button says what it answers ([`Press`]). Used
//! by [`crate::telegram`], [`crate::discord`] and [`crate::slack`].

use kaiwa_core::message::{OptionsRequest, SessionKey};
use kaiwa_core::orchestrator::{ForAdapters, OrchestratorError};

/// What every custom id of Kaiwa's components starts with.
pub const NAMESPACE: &str = "kaiwa|";

/// What a component carries in its custom id (a Discord custom id, a Slack action id: always far below their limits).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Press {
    /// A button of a single-choice request.
    Pick { request_id: String, index: usize },
    /// The select menu of a multi-select request (the values are option indexes).
    Select { request_id: String },
}

impl Press {
    pub fn request_id(&self) -> &str {
        match self {
            Press::Pick { request_id, .. } | Press::Select { request_id } => request_id,
        }
    }

    pub fn encode(&self) -> String {
        match self {
            Press::Pick { request_id, index } => format!("kaiwa|p|{request_id}|{index}"),
            Press::Select { request_id } => format!("kaiwa|s|{request_id}"),
        }
    }

    pub fn decode(id: &str) -> Option<Press> {
        let mut parts = id.split('|');
        if parts.next()? != "kaiwa" {
            return None;
        }
        let kind = parts.next()?;
        let request_id = parts.next()?.to_string();
        if request_id.is_empty() || request_id.len() > 24 {
            return None;
        }
        let press = match kind {
            "p" => Press::Pick {
                request_id,
                index: parts.next()?.parse().ok()?,
            },
            "s" => Press::Select { request_id },
            _ => return None,
        };
        parts.next().is_none().then_some(press)
    }
}

/// A press on buttons that are no longer (or never were) the user's.
pub const STALE_NOTICE: &str = "This button is no longer active. / このボタンはもう使えません。";

/// A Stop pressed after its reply was complete.
pub const ALREADY_COMPLETE: &str =
    "This answer is already complete. / この回答はもう完了しています。";
/// "Done" on a multi-select keyboard with nothing selected.
pub const PICK_ONE: &str =
    "Choose at least one option, then press Done. / 一つ以上選んでから「決定」を押してください。";
/// A photo, a sticker, a voice message… in a place where Kaiwa answers.
pub const TEXT_ONLY: &str =
    "I can only read text messages for now. / 今はテキストのメッセージだけ読めます。";
/// The turn could not be stored: the user is asked to send it again.
pub const SAVE_FAILED: &str = "Sorry, I could not save that. Please send it again. / 保存できませんでした。もう一度送ってください。";

/// The options of `key`'s session that a press carrying `request_id` answers; `None` for a
/// stale or foreign press.
pub async fn pending_request(
    orchestrator: &ForAdapters,
    key: &SessionKey,
    request_id: &str,
) -> Result<Option<OptionsRequest>, OrchestratorError> {
    let pending = orchestrator.pending_options(key, request_id).await?;
    if pending.is_none() {
        tracing::info!(user = %key.user, "stale or foreign button pressed");
    }
    Ok(pending)
}

/// The values of the options at `indexes`, in press order and each once; `None` when an
/// index is not one of the request's options (a keyboard older than the request).
pub fn chosen_values(request: &OptionsRequest, indexes: &[usize]) -> Option<Vec<String>> {
    let mut values: Vec<String> = Vec::with_capacity(indexes.len());
    for &i in indexes {
        let option = request.options.get(i)?;
        if !values.contains(&option.value) {
            values.push(option.value.clone());
        }
    }
    Some(values)
}

/// The pressed message as it is left: its prompt and the labels chosen.
pub fn shown_choice(request: &OptionsRequest, values: &[String]) -> String {
    format!(
        "{}\n\n✓ {}",
        request.prompt,
        request.labels_of(values).join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use kaiwa_core::message::OptionItem;

    fn request() -> OptionsRequest {
        let mut request = OptionsRequest::new(
            "Pick",
            vec![
                OptionItem::new("a", "Apple"),
                OptionItem::new("b", "Banana"),
            ],
            false,
        );
        request.request_id = "r1".into();
        request
    }

    #[test]
    fn a_press_outside_the_options_is_stale_and_repeats_count_once() {
        let request = request();
        assert_eq!(
            chosen_values(&request, &[1, 0, 1]),
            Some(vec!["b".into(), "a".into()])
        );
        assert_eq!(chosen_values(&request, &[2]), None);
        assert_eq!(chosen_values(&request, &[]), Some(Vec::new()));
        assert_eq!(shown_choice(&request, &["b".into()]), "Pick\n\n✓ Banana");
    }
}
