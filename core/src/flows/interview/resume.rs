//! Resuming an interview ended with `/end` (seed 000 keeps what was answered): a new
//! interview of the same form in the same place first offers "resume / start over".
//! Resuming takes the earlier session's state — answers, plan, language, country, zone — and
//! asks the open question again; nothing answered is asked again and the submission keeps
//! those answers. Starting over is the usual greeting.

use super::form::Form;
use super::state::{InterviewState, Stage};
use super::{ID, InterviewFlow, lang_of};
use crate::flow::{FlowError, TurnContext, TurnOutput};
use crate::i18n::pick;
use crate::message::{OptionItem, OptionsRequest};
use crate::store::StateChange;
use std::sync::Arc;

/// The offer's option values.
pub(super) const RESUME: &str = "resume";
pub(super) const RESTART: &str = "restart";

/// What a typed answer to the offer means: `Some(true)` resume, `Some(false)` start over.
pub(super) fn typed_answer(text: &str) -> Option<bool> {
    let t = text.trim().to_lowercase();
    let has = |words: &[&str]| words.iter().any(|w| t.contains(w));
    if has(&[
        "start over",
        "restart",
        "from the start",
        "new",
        "最初から",
        "やり直",
        "はじめから",
    ]) {
        return Some(false);
    }
    if has(&["resume", "continue", "yes", "go on", "続き", "再開", "はい"]) {
        return Some(true);
    }
    None
}

impl InterviewFlow {
    /// The unfinished interview of `form_id` this place ended last, if there is one worth
    /// resuming: its session id, state and the options it was waiting on.
    pub(super) async fn resumable(
        &self,
        ctx: &TurnContext<'_>,
        form_id: &str,
    ) -> Result<Option<(i64, InterviewState, Option<OptionsRequest>)>, FlowError> {
        if ctx.ended_before == Some(false) {
            return Ok(None);
        }
        let Some(old) = ctx
            .store
            .last_finished_session(&ctx.session.key, ID)
            .await?
        else {
            return Ok(None);
        };
        if old.state.is_empty() {
            return Ok(None);
        }
        let Ok(st) = old.state.parse::<InterviewState>() else {
            tracing::warn!(
                session = old.id,
                "an earlier interview's state does not parse; not offered"
            );
            return Ok(None);
        };
        let started = st.language.is_some() || !st.done_fields().is_empty();
        if st.form_id != form_id || st.stage == Stage::Finished || !started {
            return Ok(None);
        }
        Ok(Some((old.id, st, old.pending_options)))
    }

    /// Offers to resume the interview `old` (session `old_id`).
    pub(super) fn offer_resume(
        &self,
        form: &Form,
        st: &mut InterviewState,
        old_id: i64,
        old: &InterviewState,
        out: &mut TurnOutput,
    ) {
        st.resume_offer = Some(old_id);
        // the offer speaks the language chosen before
        st.language = old.language.clone();
        let lang = lang_of(old);
        let answered = old.closed_count();
        out.say(pick(
            &lang,
            &format!(
                "Welcome back! You stopped the interview \"{}\" with {answered} of {} questions answered; your answers are kept.",
                form.title.get("en"),
                old.plan.len()
            ),
            &format!(
                "おかえりなさい。「{}」のインタビューは {} 問中 {answered} 問に回答した所で中断しています。回答は保存されています。",
                form.title.get("ja"),
                old.plan.len()
            ),
        ));
        self.show_resume_options(&lang, out);
    }

    pub(super) fn show_resume_options(&self, lang: &str, out: &mut TurnOutput) {
        out.options(
            pick(
                lang,
                "Resume where you stopped, or start over?",
                "前回の続きから再開しますか？最初からやり直しますか？",
            ),
            vec![
                OptionItem::new(RESUME, pick(lang, "Resume", "続きから")),
                OptionItem::new(RESTART, pick(lang, "Start over", "最初から")),
            ],
            false,
        );
    }

    /// The answer to the offer: resumes the earlier interview, or starts this one afresh.
    pub(super) async fn answer_resume(
        &self,
        ctx: &TurnContext<'_>,
        form: &Arc<Form>,
        st: &mut InterviewState,
        resume: bool,
        out: &mut TurnOutput,
    ) -> Result<(), FlowError> {
        let Some(old_id) = st.resume_offer.take() else {
            return Ok(());
        };
        let earlier = if resume {
            match ctx.store.session(old_id).await? {
                Some(old) if !old.state.is_empty() => old
                    .state
                    .parse::<InterviewState>()
                    .ok()
                    .map(|state| (state, old.pending_options)),
                _ => None,
            }
        } else {
            None
        };
        let Some((mut old, pending)) = earlier else {
            // afresh: the greeting, in the language chosen (it is asked again if none)
            return self.advance(ctx, form, st, out).await;
        };
        old.resume_offer = None;
        if let Some(language) = old.language.clone() {
            out.change(StateChange::SetLanguage { language });
        }
        if let Some(country) = old.country.clone() {
            out.change(StateChange::SetCountry { country });
        }
        if let Some(timezone) = old.timezone.clone() {
            out.change(StateChange::SetTimezone { timezone });
        }
        *st = old;
        self.repeat_last(pending.as_ref(), form, st, out);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::typed_answer;

    #[test]
    fn typed_answers_to_the_offer() {
        assert_eq!(typed_answer("Resume"), Some(true));
        assert_eq!(typed_answer("続きから"), Some(true));
        assert_eq!(typed_answer("start over please"), Some(false));
        assert_eq!(typed_answer("最初から"), Some(false));
        assert_eq!(typed_answer("Hanako"), None);
    }
}
