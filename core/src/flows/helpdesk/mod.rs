//! The help-desk flow (seed 003) on the plan–execute–reflect framework of seed 002.
//!
//! A question is planned into sub-tasks (`Desk::plan`); each runs concurrently (bounded):
//! `select_tools` → `execute_tools` → `create_subtask_answer` as one agent loop over the
//! knowledge-base tools `search_kb` and `get_kb_document`, then `reflect_subtask`, retried
//! with the reflection's advice (and without the earlier tool messages) until sufficient or 3
//! tries; `create_answer` integrates the sub-answers and cites the passages used as
//! `[n] path#heading`. Citations are checked in code: a number that names no passage is
//! removed. Without a model the answer is the best passages with their citations, or a clear
//! "nothing found" and an offer to reach a human. After each answer the user rates it
//! (Solved / Not solved / Talk to a human), or says thanks, which rates it solved; a
//! greeting is greeted, not searched; a handoff goes to the admin sink.

use crate::admin::AdminNotice;
use crate::agent::research::{Library, Research};
use crate::agent::workflow::run_workflow;
use crate::flow::{CommandInfo, Flow, FlowError, TurnContext, TurnInput, TurnOutput};
use crate::i18n::{pick, written_language};
use crate::kb::{KbSearch, KnowledgeBase};
use crate::message::OptionItem;
use crate::store::StateChange;
use crate::store::Ticket;
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

pub const ID: &str = "helpdesk";
/// Tries per sub-task (seed 003: 3).
pub const MAX_TRIES: u32 = 3;
/// Sub-tasks running at once.
pub const CONCURRENCY: usize = 4;

pub struct HelpdeskFlow {
    kb: Arc<KnowledgeBase>,
    library: Library,
    /// An interview flow runs beside it: a wish to apply goes there.
    interviews: bool,
}

impl HelpdeskFlow {
    /// Answers from `search`: a knowledge base (by words), or a [`KbSearch`] with meaning.
    pub fn new(search: impl Into<KbSearch>) -> Self {
        let search = search.into();
        let kb = search.kb.clone();
        let library = Library::knowledge_base(ID, "a help-desk assistant for the team", search);
        HelpdeskFlow {
            kb,
            library,
            interviews: false,
        }
    }

    /// Hands a wish to apply for a job to the interview flow that runs beside it.
    pub fn with_interviews(mut self) -> Self {
        self.interviews = true;
        self
    }

    /// Searches the web too (`[search] helpdesk = true`): the model gets `web_search`.
    pub fn with_web(mut self, web: Arc<crate::search::WebSearch>) -> Self {
        self.library.tools.push(crate::agent::typed(
            crate::flows::reading::book_guide::WebSearchTool(web),
        ));
        self
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct DeskState {
    tickets: i64,
    last_question: Option<String>,
    last_answer: Option<String>,
    /// The ticket whose feedback buttons are showing.
    rating: Option<i64>,
    /// The last question and answer were marked "Not solved": what the user writes next is
    /// about them.
    #[serde(default)]
    unsolved: bool,
    /// The answer that did not solve the last question (for the team, with a handoff).
    #[serde(default)]
    unsolved_answer: Option<String>,
    /// The user asked for a person ("Talk to a human"): until they rate an answer solved,
    /// what the knowledge base does not answer is added to their request for the team.
    #[serde(default)]
    with_team: bool,
}

/// The "Talk to a human" button alone.
fn offer_human(out: &mut TurnOutput, lang: &str) {
    out.options(
        pick(
            lang,
            "Would you like to ask a person?",
            "担当者に問い合わせますか？",
        ),
        vec![OptionItem::new(
            "human",
            pick(lang, "Talk to a human", "担当者と話す"),
        )],
        false,
    );
}

/// Where the conversation is, for the team: platform, chat, thread and session.
fn link(ctx: &TurnContext<'_>) -> String {
    let key = &ctx.session.key;
    format!(
        "{}:{}/{} (session {})",
        key.platform, key.chat, key.thread, ctx.session.id
    )
}

/// What a short message typed at the rating's buttons means (`pending`: the values of
/// the buttons showing): `solved`, `not_solved` or `human` at "Did this answer your
/// question?" ("It worked", 「解決しました」, "No, still broken", 「ダメでした」, "Can I talk to a
/// person?"); `human` for a yes at "Would you like to ask a person?" alone. A long
/// message, or a question other than for a person, is a message of its own; so is a
/// "not solved" once it was said (`unsolved`: what follows is the detail asked for).
fn typed_rating(text: &str, pending: &[String], unsolved: bool) -> Option<&'static str> {
    let t = text.trim().to_lowercase();
    let words = crate::i18n::words(&t);
    let short = if crate::i18n::has_japanese(&t) {
        t.chars().count() <= 15
    } else {
        words.len() <= 7
    };
    if !short {
        return None;
    }
    let said = |en: &[&str], ja: &[&str]| crate::i18n::says_any(&t, &words, en, ja);
    let person = said(
        &["human", "person", "agent", "operator", "someone", "staff"],
        &["担当者", "人と話", "人間", "オペレーター"],
    );
    let no = said(
        &[
            "no", "nope", "not", "didn't", "doesn't", "don't", "still", "wrong", "unsolved",
            "isn't",
        ],
        &[
            "いいえ",
            "ない",
            "ません",
            "ダメ",
            "だめ",
            "まだ",
            "違",
            "いや",
        ],
    );
    let yes = said(
        &[
            "yes", "yep", "yeah", "solved", "worked", "works", "fixed", "perfect", "great", "ok",
            "okay", "sure", "please",
        ],
        &[
            "はい",
            "解決",
            "できました",
            "直りました",
            "うまくいき",
            "大丈夫",
            "お願い",
            "ええ",
        ],
    );
    // "Is there no way to export?" is a new question
    let asks = t.contains('?') || t.contains('？');
    let has = |v: &str| pending.iter().any(|p| p == v);
    if has("solved") {
        if person {
            Some("human")
        } else if no && !asks {
            (!unsolved).then_some("not_solved")
        } else if yes && !asks {
            Some("solved")
        } else {
            None
        }
    } else if has("human") && (person || (yes && !no && !asks)) {
        Some("human")
    } else {
        None
    }
}

/// Whether `text` asks for a person ("Can I talk to a human?", 「担当者と話したい」): a
/// person named with a way to reach them, in a short message.
fn wants_a_person(text: &str) -> bool {
    let t = text.trim().to_lowercase();
    let words = crate::i18n::words(&t);
    if crate::i18n::has_japanese(&t) {
        return t.chars().count() <= 25
            && ["担当者", "人と", "人間", "オペレーター", "スタッフ"]
                .iter()
                .any(|w| t.contains(w))
            && ["話", "繋", "つな", "相談", "連絡"]
                .iter()
                .any(|w| t.contains(w));
    }
    words.len() <= 10
        && [
            "human", "person", "agent", "operator", "someone", "staff", "people",
        ]
        .iter()
        .any(|w| words.contains(w))
        && ["talk", "speak", "contact", "reach", "connect", "chat"]
            .iter()
            .any(|w| words.contains(w))
}

fn rating_options(lang: &str) -> Vec<OptionItem> {
    vec![
        OptionItem::new("solved", pick(lang, "Solved", "解決した")),
        OptionItem::new("not_solved", pick(lang, "Not solved", "解決しない")),
        OptionItem::new("human", pick(lang, "Talk to a human", "担当者と話す")),
    ]
}

impl HelpdeskFlow {
    async fn answer(
        &self,
        ctx: &TurnContext<'_>,
        st: &mut DeskState,
        question: &str,
        out: &mut TurnOutput,
    ) {
        if let Err(e) = self.kb.refresh_if_changed() {
            tracing::warn!(error = %e, "knowledge base refresh failed; searching the previous index");
        }
        let lang = written_language(question)
            .unwrap_or(ctx.language())
            .to_string();
        let desk = Research {
            question: question.to_string(),
            previous: st.last_question.clone().zip(st.last_answer.clone()),
            library: &self.library,
            models: ctx.models,
            ledger: ctx.ledger,
            lang: lang.clone(),
            sources_allowed: None,
        };
        let result = run_workflow(&desk, MAX_TRIES, CONCURRENCY).await;
        if st.with_team && !result.confident {
            // a detail for the person, or "anyone?": theirs, not "I found nothing" or "the
            // closest I found"
            self.add_for_team(ctx, st, question, out);
            return;
        }
        // details after "Not solved" are about the question before: the team sees both
        let earlier = std::mem::take(&mut st.unsolved)
            .then(|| st.last_question.clone().zip(st.last_answer.clone()))
            .flatten();
        let question = match &earlier {
            Some((first, _)) => format!("{first}\n(not solved) {question}"),
            None => question.to_string(),
        };
        st.unsolved_answer = earlier.map(|(_, answer)| answer);
        st.tickets += 1;
        let ticket_no = st.tickets;
        out.change(StateChange::SaveTicket {
            ticket: Ticket {
                ticket_no,
                question: question.clone(),
                plan: result.plan.clone(),
                sub_answers: result.sub_answers.clone(),
                answer: result.text.clone(),
                sources: result.sources.iter().map(|p| p.citation()).collect(),
                feedback: None,
            },
        });
        st.last_question = Some(question);
        st.last_answer = Some(result.text.clone());
        st.rating = Some(ticket_no);
        out.say(result.text);
        if result.sources.is_empty() {
            offer_human(out, &lang);
        } else {
            out.options(
                pick(
                    &lang,
                    "Did this answer your question?",
                    "この回答で解決しましたか？",
                ),
                rating_options(&lang),
                false,
            );
        }
    }

    /// What the user wrote (or asked with `/ask`, or was handed with): thanks after an
    /// answer rate it solved, a greeting is greeted, anything else is a question.
    async fn text(
        &self,
        ctx: &TurnContext<'_>,
        st: &mut DeskState,
        text: &str,
        out: &mut TurnOutput,
    ) {
        let lang = written_language(text).unwrap_or(ctx.language());
        // the buttons showing, read only while a rating waits
        let pending = || -> Vec<String> {
            ctx.session
                .pending_options
                .iter()
                .flat_map(|p| p.options.iter().map(|o| o.value.clone()))
                .collect()
        };
        if st.rating.is_some()
            && let Some(value) = typed_rating(text, &pending(), st.unsolved)
        {
            self.feedback(ctx, st, value, out);
        } else if wants_a_person(text) && !st.with_team {
            // not a question for the knowledge base: what it is about goes to the team
            st.with_team = true;
            st.rating = None;
            out.say(pick(
                lang,
                "Of course. Tell me in a message what it is about, and I'll pass it to the team; a person will get back to you here.",
                "承知しました。ご用件をメッセージでお知らせください。担当者に伝え、こちらで担当者からご連絡します。",
            ));
        } else if crate::i18n::is_thanks(text) {
            match st.rating {
                Some(_) => self.feedback(ctx, st, "solved", out),
                None => {
                    out.say(pick(
                        lang,
                        "You're welcome! Ask me anything else here.",
                        "どういたしまして。ほかにも質問があればどうぞ。",
                    ));
                }
            }
        } else if !text.chars().any(char::is_alphanumeric) && !st.with_team {
            // "??", "…", an emoji: nothing to search for
            out.say(pick(
                lang,
                "What can I help you with? Ask your question in a few words.",
                "どのようなご用件でしょうか？ご質問を言葉で送ってください。",
            ));
        } else if crate::i18n::is_greeting(text) && st.with_team {
            self.add_for_team(ctx, st, text, out);
        } else if crate::i18n::is_greeting(text) {
            out.say(pick(
                lang,
                "Hello! What can I help you with? Ask your question.",
                "こんにちは。どのようなご用件でしょうか？ご質問をどうぞ。",
            ));
        } else if self.interviews && crate::flows::interview::wants_to_apply(text) {
            out.hand_off("interview", "");
        } else {
            self.answer(ctx, st, text, out).await;
        }
    }

    /// Adds what the user wrote to the request the team has (a notice with Take over).
    fn add_for_team(
        &self,
        ctx: &TurnContext<'_>,
        st: &DeskState,
        text: &str,
        out: &mut TurnOutput,
    ) {
        let lang = written_language(text).unwrap_or(ctx.language());
        let mut fields = vec![("User".into(), ctx.user.display_name.clone())];
        if st.tickets > 0 {
            fields.push(("Ticket".into(), st.tickets.to_string()));
        }
        fields.push(("Link".into(), link(ctx)));
        out.admin.push(AdminNotice {
            kind: "handoff".into(),
            title: format!("Help-desk: {} writes to the team", ctx.user.display_name),
            body: format!("Added to the request:\n{}", text.trim()),
            fields,
            session_id: None,
            actions: vec![crate::admin::AdminActionKind::TakeOver],
        });
        out.say(pick(
            lang,
            "I've added this to your request; a person from the team will get back to you here.",
            "担当者へのご依頼に追記しました。こちらで担当者からご連絡します。",
        ));
    }

    fn feedback(
        &self,
        ctx: &TurnContext<'_>,
        st: &mut DeskState,
        value: &str,
        out: &mut TurnOutput,
    ) {
        let lang = st
            .last_question
            .as_deref()
            .and_then(written_language)
            .unwrap_or(ctx.language())
            .to_string();
        let Some(ticket_no) = st.rating.take() else {
            return;
        };
        st.unsolved = false;
        st.with_team = value == "human" || (st.with_team && value != "solved");
        out.change(StateChange::SetTicketFeedback {
            ticket_no,
            feedback: value.to_string(),
        });
        match value {
            "solved" => {
                out.say(pick(
                    &lang,
                    "Glad it helped! Ask me anything else here.",
                    "お役に立ててよかったです。ほかにも質問があればどうぞ。",
                ));
            }
            "not_solved" => {
                out.say(pick(
                    &lang,
                    "Sorry about that. Tell me more about the problem, or choose to talk to a human.",
                    "申し訳ありません。状況をもう少し詳しく教えていただくか、担当者にご相談ください。",
                ));
                st.unsolved = true;
                st.rating = Some(ticket_no);
                offer_human(out, &lang);
            }
            _ => {
                out.admin.push(AdminNotice {
                    kind: "handoff".into(),
                    title: format!("Help-desk handoff from {}", ctx.user.display_name),
                    body: format!(
                        "Question:\n{}\n\n{}Bot's answer:\n{}",
                        st.last_question.clone().unwrap_or_default(),
                        st.unsolved_answer
                            .as_ref()
                            .map(|a| format!("First answer (not solved):\n{a}\n\n"))
                            .unwrap_or_default(),
                        st.last_answer.clone().unwrap_or_default()
                    ),
                    fields: vec![
                        ("User".into(), ctx.user.display_name.clone()),
                        ("Ticket".into(), ticket_no.to_string()),
                        ("Link".into(), link(ctx)),
                    ],
                    session_id: None,
                    actions: vec![crate::admin::AdminActionKind::TakeOver],
                });
                out.say(pick(
                    &lang,
                    "I've passed your question to the team; a person will get back to you here.",
                    "ご質問を担当者に引き継ぎました。こちらで担当者からご連絡します。",
                ));
            }
        }
    }
}

#[async_trait]
impl Flow for HelpdeskFlow {
    fn id(&self) -> &str {
        ID
    }

    fn description(&self) -> &str {
        "answers questions from the team's knowledge base, with citations"
    }

    fn start_commands(&self) -> Vec<CommandInfo> {
        vec![CommandInfo {
            name: "ask",
            description_en: "ask the help-desk a question (/ask QUESTION)",
            description_ja: "ヘルプデスクに質問する（/ask 質問）",
        }]
    }

    fn farewell(&self, lang: &str) -> Option<String> {
        Some(pick(
            lang,
            "Closed. Send a new message to ask again.",
            "終了しました。新しいメッセージで再度質問できます。",
        ))
    }

    async fn turn(&self, ctx: TurnContext<'_>, input: TurnInput) -> Result<TurnOutput, FlowError> {
        let mut out = TurnOutput::default();
        let mut st: DeskState = ctx.state()?;
        let lang = ctx.language().to_string();
        match input {
            TurnInput::Start => match ctx.start_arg.filter(|a| !a.trim().is_empty()) {
                Some(text) => self.text(&ctx, &mut st, text, &mut out).await,
                None => {
                    out.say(pick(
                        &lang,
                        "Hello! What can I help you with? Ask your question.",
                        "こんにちは。どのようなご用件でしょうか？ご質問をどうぞ。",
                    ));
                }
            },
            TurnInput::Resume => {
                out.say(pick(
                    &lang,
                    "Welcome back! Ask your next question.",
                    "おかえりなさい。次のご質問をどうぞ。",
                ));
            }
            TurnInput::Text(text) => self.text(&ctx, &mut st, &text, &mut out).await,
            TurnInput::Choice { values, .. } => {
                let value = values.first().cloned().unwrap_or_default();
                self.feedback(&ctx, &mut st, &value, &mut out);
            }
            TurnInput::Command { .. } => out.unknown_command = true,
        }
        out.set_state(&st)?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests;
