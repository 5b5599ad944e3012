//! The end of the questions: the Auditor's final audit, then the answers shown for
//! confirmation with the options to submit or change a field.

use super::auditor;
use super::form::{Form, Variant};
use super::state::{InterviewState, Stage};
use super::{InterviewFlow, lang_of, reviewer};
use crate::flow::{FlowError, TurnContext, TurnOutput};
use crate::i18n::pick;
use crate::message::OptionItem;
use crate::store::StateChange;
use std::sync::Arc;

/// What a typed answer to "Is everything correct?" means: `Some(true)` submit,
/// `Some(false)` change an answer (a "no" anywhere wins: "yes, but change my email").
pub(super) fn typed_answer(text: &str) -> Option<bool> {
    let t = text.trim().to_lowercase();
    let words = crate::i18n::words(&t);
    let said = |en: &[&str], ja: &[&str]| crate::i18n::says_any(&t, &words, en, ja);
    if said(
        &[
            "no",
            "nope",
            "change",
            "edit",
            "fix",
            "wrong",
            "modify",
            "not",
            "isn't",
            "incorrect",
        ],
        &[
            "いいえ",
            "修正",
            "変更",
            "直",
            "違",
            "間違",
            "訂正",
            "変え",
            "くない",
        ],
    ) {
        return Some(false);
    }
    if said(
        &[
            "yes", "yep", "yeah", "ok", "okay", "sure", "confirm", "submit", "send", "correct",
            "right", "good", "fine", "perfect", "lgtm",
        ],
        &[
            "はい",
            "ええ",
            "確定",
            "送信",
            "大丈夫",
            "問題ありません",
            "問題な",
            "合って",
            "正しい",
            "それで",
            "お願い",
            "オッケー",
        ],
    ) {
        return Some(true);
    }
    None
}

/// The field of the plan `text` names by its label or id ("the email, please",
/// 「メールアドレスを直したい」), when it names only one.
pub(super) fn field_named(form: &Form, st: &InterviewState, text: &str) -> Option<String> {
    let fields = st.plan.iter().filter_map(|id| form.field(id));
    reviewer::the_one_named(fields, text, |f| (&f.id, &f.label)).map(|f| f.id.clone())
}

impl InterviewFlow {
    pub(super) async fn finish(
        &self,
        ctx: &TurnContext<'_>,
        form: &Arc<Form>,
        st: &mut InterviewState,
        out: &mut TurnOutput,
    ) -> Result<(), FlowError> {
        st.current = None;
        match form.variant {
            Variant::Application => {
                out.change(StateChange::SetCurrentAgent {
                    agent: auditor::AGENT.into(),
                });
                let audit = auditor::audit(
                    ctx.models.for_agent(auditor::AGENT).as_deref(),
                    form,
                    st,
                    ctx.ledger,
                )
                .await;
                self.submit(ctx, form, st, Some(audit), out);
                Ok(())
            }
            Variant::Plain => {
                st.stage = Stage::Confirming;
                self.show_confirmation(form, st, out);
                Ok(())
            }
        }
    }

    pub(super) fn show_confirmation(&self, form: &Form, st: &InterviewState, out: &mut TurnOutput) {
        let lang = lang_of(st);
        let mut text = pick(&lang, "Here is what I have:\n", "ご回答内容の確認です:\n");
        for id in &st.plan {
            if let Some(field) = form.field(id) {
                let value = match &st.field(id).value {
                    // a choice shows its label, not its stored value
                    Some(v) => field
                        .options
                        .iter()
                        .find(|o| o.value == *v)
                        .map_or(v.clone(), |o| o.label.get(&lang).to_string()),
                    None => pick(&lang, "(not answered)", "（未回答）"),
                };
                text.push_str(&format!("- {}: {}\n", field.label.get(&lang), value));
            }
        }
        out.say(text.trim_end());
        out.options(
            pick(
                &lang,
                "Is everything correct?",
                "この内容でよろしいですか？",
            ),
            vec![
                OptionItem::new("confirm", pick(&lang, "Confirm and submit", "確定して送信")),
                OptionItem::new("change", pick(&lang, "Change an answer", "回答を修正する")),
            ],
            false,
        );
    }

    /// The applicant chose to change field `id`: its answer is cleared and asked again.
    pub(super) async fn change_field(
        &self,
        ctx: &TurnContext<'_>,
        form: &Arc<Form>,
        st: &mut InterviewState,
        out: &mut TurnOutput,
        id: &str,
    ) -> Result<(), FlowError> {
        if form.field(id).is_none() {
            return Ok(());
        }
        *st.field_mut(id) = super::state::FieldProgress::default();
        st.stage = Stage::Interviewing;
        self.advance(ctx, form, st, out).await
    }

    pub(super) fn show_change_options(
        &self,
        form: &Form,
        st: &InterviewState,
        out: &mut TurnOutput,
    ) {
        let lang = lang_of(st);
        out.options(
            pick(
                &lang,
                "Which answer would you like to change?",
                "どの回答を修正しますか？",
            ),
            st.plan
                .iter()
                .filter_map(|id| form.field(id))
                .map(|f| OptionItem::new(f.id.clone(), f.label.get(&lang)))
                .collect(),
            false,
        );
    }
}
