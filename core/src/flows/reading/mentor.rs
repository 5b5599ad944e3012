//! Mentor (seed 004): weekly / monthly reviews of the user's reading. Tools
//! `get_mentor_context(period_days)` and `save_mentor_feedback(feedback_type, content)`.
//! The review always praises concretely (numbers, a quoted insight), may reflect on one
//! insight, and always ends with a small concrete next step; a quiet period is met with
//! encouragement, never blame. Without a model the review is a template from the same
//! context. Exposed as the `mentor` flow: a conversation. Opening it greets and offers a
//! weekly or monthly review; `/review weekly|monthly` (or a pick of the offer) writes and
//! saves one; what the member asks after that is answered from that review's data in the
//! same session, and saves nothing — except what to read next, which goes to the
//! recommendations. The mentor names only what it was given: a review or an answer that
//! quotes a book or a note neither the member's data nor the catalogue holds is refused
//! (the review, back to the model) or replaced by the data's answer.

use super::catalogue::Catalogue;
use crate::agent::{Agent, ToolError, ToolOutput, TypedTool, typed};
use crate::flow::{CommandInfo, Flow, FlowError, TurnContext, TurnInput, TurnOutput};
use crate::i18n::pick;
use crate::llm::ChatMessage;
use crate::message::Platform;
use crate::store::Reads;
use crate::store::StateChange;
use crate::store::reading::{FeedbackType, Insight, ReadingChange, ReadingStatus};
use async_trait::async_trait;
use chrono::{Duration, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

pub const ID: &str = "mentor";
pub const AGENT: &str = "mentor";

/// What a review is based on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MentorContext {
    pub period_days: i64,
    pub books_finished: Vec<String>,
    pub books_reading: Vec<String>,
    /// `(book, insight)`, newest first, within the period.
    pub insights: Vec<(String, Insight)>,
    pub goals: Vec<String>,
}

impl MentorContext {
    /// The books named as a member reading in `lang` knows them (こころ for Kokoro).
    pub fn titles_in(mut self, catalogue: &Catalogue, lang: &str) -> Self {
        let known = |t: &mut String| *t = catalogue.title_in(t, lang);
        self.books_finished.iter_mut().for_each(known);
        self.books_reading.iter_mut().for_each(known);
        self.insights.iter_mut().for_each(|(t, _)| known(t));
        self
    }

    pub fn render(&self) -> String {
        let mut s = format!(
            "Period: last {} days\nBooks finished: {} ({})\nBooks in progress: {}\nInsights: {}\n",
            self.period_days,
            self.books_finished.len(),
            self.books_finished.join(", "),
            self.books_reading.join(", "),
            self.insights.len()
        );
        for (book, i) in self.insights.iter().take(10) {
            s.push_str(&format!("- [{}] ({}) {}\n", book, i.kind.as_str(), i.text));
        }
        for g in &self.goals {
            s.push_str(&format!("Goal: {g}\n"));
        }
        s
    }
}

/// Gathers the user's reading of the last `period_days` days.
pub async fn mentor_context(
    store: &dyn Reads,
    platform: Platform,
    user: &str,
    period_days: i64,
) -> Result<MentorContext, FlowError> {
    let since = Utc::now() - Duration::days(period_days);
    let records = store.reading_records(platform, user).await?;
    let mut ctx = MentorContext {
        period_days,
        books_finished: Vec::new(),
        books_reading: Vec::new(),
        insights: Vec::new(),
        goals: Vec::new(),
    };
    for r in &records {
        match r.status {
            ReadingStatus::Completed if r.finished_at.is_some_and(|f| f >= since) => {
                ctx.books_finished.push(r.title.clone())
            }
            ReadingStatus::Reading => ctx.books_reading.push(r.title.clone()),
            _ => {}
        }
        for i in store.insights(r.id).await? {
            if i.at >= since {
                ctx.insights.push((r.title.clone(), i));
            }
        }
    }
    ctx.insights.sort_by_key(|i| std::cmp::Reverse(i.1.at));
    ctx.goals = store
        .profile_entries(platform, user)
        .await?
        .into_iter()
        .filter(|e| e.kind == crate::store::reading::ProfileKind::Goal)
        .map(|e| e.text)
        .collect();
    Ok(ctx)
}

/// The template review (the floor).
pub fn template_review(ctx: &MentorContext, lang: &str) -> String {
    let period = if ctx.period_days <= 7 {
        pick(lang, "this week", "今週")
    } else {
        pick(lang, "this month", "今月")
    };
    let mut out = if ctx.books_finished.is_empty() && ctx.insights.is_empty() {
        pick(
            lang,
            &format!("A quiet {period} — that's fine; reading has its seasons."),
            &format!("{period}は静かな期間でしたね。読書にも波があるので大丈夫です。"),
        )
    } else {
        pick(
            lang,
            &format!(
                "Well done {period}: {} book(s) finished and {} insight(s) recorded.",
                ctx.books_finished.len(),
                ctx.insights.len()
            ),
            &format!(
                "{period}は {} 冊を読み終え、{} 件の気づきを記録しました。素晴らしいです。",
                ctx.books_finished.len(),
                ctx.insights.len()
            ),
        )
    };
    if let Some((book, insight)) = ctx.insights.first() {
        out.push_str(&pick(
            lang,
            &format!(
                " I liked what you noted about «{book}»: “{}”.",
                insight.text
            ),
            &format!(
                " 『{book}』についての「{}」という気づきが印象的でした。",
                insight.text
            ),
        ));
    }
    let step = match (ctx.books_reading.first(), ctx.insights.is_empty()) {
        (Some(book), _) => pick(
            lang,
            &format!(
                " Next step: read 10 pages of «{book}» and write down one sentence that stays with you."
            ),
            &format!(" 次の一歩: 『{book}』を10ページ読み、心に残った一文を書き留めてみましょう。"),
        ),
        (None, true) => pick(
            lang,
            " Next step: pick one book and read for 10 minutes before bed.",
            " 次の一歩: 一冊選んで、寝る前に10分だけ読んでみましょう。",
        ),
        (None, false) => pick(
            lang,
            " Next step: choose your next book — /recommend can help.",
            " 次の一歩: 次の一冊を選びましょう。/recommend がお手伝いします。",
        ),
    };
    out.push_str(&step);
    out
}

struct Work {
    context: MentorContext,
    /// What a review may quote ([`known_text`]).
    known: String,
    saved: Option<String>,
}

/// What the mentor may name or quote, lowercased: the member's books, notes and goals of
/// the period, and the club's catalogue (titles and authors in both languages).
fn known_text(context: &MentorContext, catalogue: Option<&Catalogue>) -> String {
    let mut known = context.render();
    for book in catalogue.map(|c| c.books()).unwrap_or_default() {
        let names = [
            Some(&book.title),
            book.title_ja.as_ref(),
            Some(&book.author),
            book.author_ja.as_ref(),
        ];
        for name in names.into_iter().flatten() {
            known.push('\n');
            known.push_str(name);
        }
    }
    known.to_lowercase()
}

/// The first span `text` quotes as a title or a note («…», “…”, "…", 『…』) that `known`
/// (lowercased) does not hold: a book or a note the mentor was not given, which the model
/// made up ("The Nightingale" by an author who does not exist).
fn unknown_quote(text: &str, known: &str) -> Option<String> {
    const PAIRS: [(char, char); 4] = [('«', '»'), ('“', '”'), ('"', '"'), ('『', '』')];
    for (open, close) in PAIRS {
        let mut rest = text;
        while let Some(start) = rest.find(open) {
            let after = &rest[start + open.len_utf8()..];
            let Some(end) = after.find(close) else {
                break;
            };
            let quoted = after[..end]
                .trim()
                .trim_end_matches(['.', ',', '!', '?', '。', '、'])
                .to_lowercase();
            if !quoted.is_empty() && !known.contains(&quoted) {
                return Some(after[..end].trim().to_string());
            }
            rest = &after[end + close.len_utf8()..];
        }
    }
    None
}

#[derive(Deserialize, JsonSchema)]
pub struct PeriodArgs {
    /// 7 (weekly) or 30 (monthly).
    pub period_days: i64,
}
struct GetMentorContext;
impl TypedTool<Work> for GetMentorContext {
    type Args = PeriodArgs;
    const NAME: &'static str = "get_mentor_context";
    fn description(&self) -> String {
        "The user's books finished, books in progress, insights and goals for the period.".into()
    }
    async fn run(&self, w: &mut Work, a: PeriodArgs) -> Result<ToolOutput, ToolError> {
        if a.period_days != w.context.period_days {
            return Err(ToolError::Rejected(format!(
                "this review covers {} days",
                w.context.period_days
            )));
        }
        Ok(ToolOutput::ok(w.context.render()))
    }
}

#[derive(Deserialize, JsonSchema)]
pub struct FeedbackArgs {
    pub feedback_type: FeedbackType,
    /// The review as sent to the user.
    pub content: String,
}
struct SaveMentorFeedback;
impl TypedTool<Work> for SaveMentorFeedback {
    type Args = FeedbackArgs;
    const NAME: &'static str = "save_mentor_feedback";
    fn description(&self) -> String {
        "Save the review (praise with numbers, optionally one insight, and one concrete next step) and end.".into()
    }
    async fn run(&self, w: &mut Work, a: FeedbackArgs) -> Result<ToolOutput, ToolError> {
        if a.content.trim().is_empty() {
            return Err(ToolError::InvalidArguments("the review is empty".into()));
        }
        if let Some(quoted) = unknown_quote(&a.content, &w.known) {
            return Err(ToolError::Rejected(format!(
                "{quoted:?} is none of the member's books or notes: quote only what get_mentor_context gave"
            )));
        }
        w.saved = Some(a.content);
        Ok(ToolOutput::finish("saved"))
    }
}

/// `Some(true)` for "weekly on" (opt in to the review the bot sends by itself), `Some(false)`
/// for "weekly off", `None` for a review now.
pub fn subscription_request(arg: &str) -> Option<bool> {
    let words: Vec<String> = arg.split_whitespace().map(str::to_lowercase).collect();
    let has = |list: &[&str]| words.iter().any(|w| list.contains(&w.as_str()));
    if has(&["on", "subscribe", "オン"]) {
        Some(true)
    } else if has(&["off", "unsubscribe", "stop", "オフ"]) {
        Some(false)
    } else {
        None
    }
}

/// The mentor's conversation; with the club's catalogue, books are named as the member
/// knows them.
#[derive(Default)]
pub struct MentorFlow {
    catalogue: Option<Arc<Catalogue>>,
}

impl MentorFlow {
    pub fn new() -> Self {
        Self::default()
    }

    /// Names the books as `catalogue` gives them in the member's language.
    pub fn with_catalogue(mut self, catalogue: Arc<Catalogue>) -> Self {
        self.catalogue = Some(catalogue);
        self
    }

    /// The member's reading of the last `days`, their books named in `lang`.
    async fn context(
        &self,
        ctx: &TurnContext<'_>,
        days: i64,
        lang: &str,
    ) -> Result<MentorContext, FlowError> {
        let key = &ctx.session.key;
        let context = mentor_context(ctx.store, key.platform, &key.user, days).await?;
        Ok(match &self.catalogue {
            Some(catalogue) => context.titles_in(catalogue, lang),
            None => context,
        })
    }
}

#[async_trait]
impl Flow for MentorFlow {
    fn id(&self) -> &str {
        ID
    }
    fn description(&self) -> &str {
        "weekly and monthly reading reviews"
    }
    fn start_commands(&self) -> Vec<CommandInfo> {
        vec![CommandInfo {
            name: "review",
            description_en: "a review of your reading (/review weekly|monthly; /review weekly on|off for a review every Sunday)",
            description_ja: "読書の振り返り（/review weekly|monthly、毎週日曜に受け取るには /review weekly on|off）",
        }]
    }

    fn farewell(&self, lang: &str) -> Option<String> {
        Some(pick(
            lang,
            "The review is closed. Send /review for another, or /reading to go back to your book.",
            "振り返りを終えました。/review でもう一度、/reading で読書に戻れます。",
        ))
    }

    async fn turn(&self, ctx: TurnContext<'_>, input: TurnInput) -> Result<TurnOutput, FlowError> {
        let mut out = TurnOutput::default();
        let lang = ctx.language().to_string();
        let mut st: MentorState = ctx.state()?;
        match input {
            TurnInput::Start => match ctx.start_arg.map(str::trim).filter(|a| !a.is_empty()) {
                Some(arg) => self.request(&ctx, &mut st, arg, &lang, &mut out).await?,
                None => offer(&lang, &mut out),
            },
            TurnInput::Resume => offer(&lang, &mut out),
            TurnInput::Choice { values, .. } => {
                let arg = values.first().cloned().unwrap_or_else(|| "weekly".into());
                self.request(&ctx, &mut st, &arg, &lang, &mut out).await?;
            }
            TurnInput::Text(text) => {
                if subscription_request(&text).is_some() {
                    self.request(&ctx, &mut st, &text, &lang, &mut out).await?;
                } else {
                    self.follow_up(&ctx, &st, &text, &lang, &mut out).await?;
                }
            }
            TurnInput::Command { .. } => out.unknown_command = true,
        }
        out.set_state(&st)?;
        Ok(out)
    }
}

/// What the mentor conversation remembers: the period of the review it gave.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct MentorState {
    period_days: Option<i64>,
}

/// The greeting and the offer of a review.
fn offer(lang: &str, out: &mut TurnOutput) {
    out.say(pick(
        lang,
        "Hello! I'm your reading mentor. Shall we look back at your reading?",
        "こんにちは、読書メンターです。これまでの読書を振り返りましょうか？",
    ));
    out.options(
        pick(
            lang,
            "Which review would you like?",
            "どの振り返りにしますか？",
        ),
        vec![
            crate::message::OptionItem::new("weekly", pick(lang, "This week", "今週")),
            crate::message::OptionItem::new("monthly", pick(lang, "This month", "今月")),
        ],
        false,
    );
}

impl MentorFlow {
    /// `/review ARG`: a subscription change, or a review written and saved now.
    async fn request(
        &self,
        ctx: &TurnContext<'_>,
        st: &mut MentorState,
        arg: &str,
        lang: &str,
        out: &mut TurnOutput,
    ) -> Result<(), FlowError> {
        let lang = lang.to_string();
        let arg = arg.to_string();
        if let Some(enabled) = subscription_request(&arg) {
            subscribe(ctx, &arg, enabled, &lang, out);
            return Ok(());
        }
        let monthly = ["monthly", "month", "30", "月"]
            .iter()
            .any(|w| arg.to_lowercase().contains(w));
        let (feedback_type, days) = if monthly {
            (FeedbackType::Monthly, 30)
        } else {
            (FeedbackType::Weekly, 7)
        };
        let context = self.context(ctx, days, &lang).await?;
        let known = known_text(&context, self.catalogue.as_deref());
        let review = model_review(ctx, (&context, known), feedback_type, days, &lang).await;
        let review = review.unwrap_or_else(|| template_review(&context, &lang));
        out.change(StateChange::Reading {
            change: ReadingChange::AddMentorFeedback {
                feedback_type,
                content: review.clone(),
            },
        });
        out.say(review);
        out.say(pick(
            &lang,
            "Ask me anything about it; /review monthly gives the month, /reading takes you back to your book.",
            "この振り返りについて何でも聞いてください。/review monthly で月の振り返り、/reading で読書に戻れます。",
        ));
        st.period_days = Some(days);
        Ok(())
    }

    /// A question after a review: answered from the data of that review's period.
    async fn follow_up(
        &self,
        ctx: &TurnContext<'_>,
        st: &MentorState,
        question: &str,
        lang: &str,
        out: &mut TurnOutput,
    ) -> Result<(), FlowError> {
        let Some(days) = st.period_days else {
            // no review yet: the offer
            offer(lang, out);
            return Ok(());
        };
        if crate::i18n::is_thanks(question) || crate::i18n::is_greeting(question) {
            out.say(pick(
                lang,
                "You're welcome! Ask me more about your reading, or send /reading to go back to your book.",
                "どういたしまして。読書についてほかにも聞いてください。/reading で本に戻れます。",
            ));
            return Ok(());
        }
        if super::recommendation::asks_for_a_book(question) {
            out.hand_off("recommend", question.trim());
            return Ok(());
        }
        let context = self.context(ctx, days, lang).await?;
        if let Some(model) = ctx.models.for_agent(AGENT) {
            let system = format!(
                "You are a kind reading mentor. You just gave the member a review of the last {days} days. Answer \
                 their question from this data only, briefly, in {}:\n{}",
                if lang == "ja" { "Japanese" } else { "English" },
                context.render()
            );
            let agent: Agent<()> = Agent::new(AGENT, Vec::new())
                .with_max_iterations(1)
                .streaming();
            match agent
                .run(
                    model.as_ref(),
                    vec![ChatMessage::system(system), ChatMessage::user(question)],
                    (),
                    ctx.ledger,
                )
                .await
            {
                Ok(r) if !r.response_text.trim().is_empty() => {
                    let known = known_text(&context, self.catalogue.as_deref());
                    match unknown_quote(&r.response_text, &known) {
                        None => {
                            out.say(r.response_text);
                            return Ok(());
                        }
                        Some(quoted) => tracing::warn!(
                            quoted,
                            "the Mentor named what the data does not hold; answering from the data"
                        ),
                    }
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "the Mentor failed; answering from the data"),
            }
        }
        out.say(answer_from(&context, question, lang));
        Ok(())
    }
}

/// The floor's answer to a question about a review's period: what the data says about
/// what is asked (books, notes, goals), else all of it.
fn answer_from(ctx: &MentorContext, question: &str, lang: &str) -> String {
    let q = question.to_lowercase();
    let has = |words: &[&str]| words.iter().any(|w| q.contains(w));
    let none = pick(lang, "none", "なし");
    let list = |items: &[String]| {
        if items.is_empty() {
            none.clone()
        } else {
            items.join(", ")
        }
    };
    // a book written about in the period was being read, whatever its status says
    let mut reading = ctx.books_reading.clone();
    for (book, _) in &ctx.insights {
        if !reading.contains(book) && !ctx.books_finished.contains(book) {
            reading.push(book.clone());
        }
    }
    let books = pick(
        lang,
        &format!(
            "Finished: {}. In progress: {}.",
            list(&ctx.books_finished),
            list(&reading)
        ),
        &format!(
            "読み終えた本: {}。読書中: {}。",
            list(&ctx.books_finished),
            list(&reading)
        ),
    );
    let notes: Vec<String> = ctx
        .insights
        .iter()
        .take(5)
        .map(|(book, i)| {
            let kind = super::kind_name(i.kind, lang);
            pick(
                lang,
                &format!("- «{book}» ({kind}) {}", i.text),
                &format!("- 『{book}』（{kind}）{}", i.text),
            )
        })
        .collect();
    let notes = pick(
        lang,
        &format!("{} note(s):\n{}", ctx.insights.len(), notes.join("\n")),
        &format!("気づき {} 件:\n{}", ctx.insights.len(), notes.join("\n")),
    );
    let goals = pick(
        lang,
        &format!("Your goals: {}.", list(&ctx.goals)),
        &format!("目標: {}。", list(&ctx.goals)),
    );
    let period = pick(
        lang,
        &format!("In the last {} days: ", ctx.period_days),
        &format!("直近 {} 日間: ", ctx.period_days),
    );
    if has(&["note", "insight", "learn", "気づき", "メモ", "学"]) {
        format!("{period}{notes}")
    } else if has(&["book", "read", "finish", "本", "読"]) {
        format!("{period}{books}")
    } else if has(&["goal", "目標"]) {
        goals
    } else {
        format!("{period}{books}\n{notes}\n{goals}")
    }
}

/// `/review weekly on|off [Area/City]`: the weekly review switched, in the zone named (the
/// conversation's, else UTC); a zone name that is none is said and nothing is stored.
fn subscribe(ctx: &TurnContext<'_>, arg: &str, enabled: bool, lang: &str, out: &mut TurnOutput) {
    // a word shaped like a zone name (Area/City) that is none: said, nothing stored
    if let Some(unknown) = arg
        .split_whitespace()
        .find(|w| w.contains('/') && w.parse::<chrono_tz::Tz>().is_err())
    {
        out.say(pick(
                lang,
                &format!(
                    "I do not know the time zone {unknown:?}. Use a name like Asia/Tokyo or Europe/Berlin, e.g. /review weekly on Asia/Tokyo."
                ),
                &format!(
                    "タイムゾーン「{unknown}」が見つかりません。Asia/Tokyo や Europe/Berlin のような名前で、例えば /review weekly on Asia/Tokyo と送ってください。"
                ),
            ));
        return;
    }
    let timezone = arg
        .split_whitespace()
        .find_map(|w| w.parse::<chrono_tz::Tz>().ok())
        .map(|tz| tz.name().to_string())
        .or_else(|| ctx.session.timezone.clone())
        .unwrap_or_else(|| "UTC".to_string());
    out.change(StateChange::Reading {
        change: ReadingChange::SetWeeklyReview {
            enabled,
            timezone: timezone.clone(),
        },
    });
    out.say(if enabled {
            pick(
                lang,
                &format!(
                    "Done: every Sunday evening ({timezone}) I will send you a review of your week here. Send /review weekly off to stop."
                ),
                &format!(
                    "設定しました。毎週日曜の夕方（{timezone}）に、ここで一週間の振り返りをお送りします。止めるには /review weekly off を送ってください。"
                ),
            )
        } else {
            pick(
                lang,
                "Done: no more weekly reviews. Send /review weekly on to start them again.",
                "週ごとの振り返りの送信を止めました。再開するには /review weekly on を送ってください。",
            )
        });
}

/// The Mentor agent's review of the last `days` (none without a model, or when it failed).
async fn model_review(
    ctx: &TurnContext<'_>,
    (context, known): (&MentorContext, String),
    feedback_type: FeedbackType,
    days: i64,
    lang: &str,
) -> Option<String> {
    let model = ctx.models.for_agent(AGENT)?;
    let agent = Agent::new(
        AGENT,
        vec![typed(GetMentorContext), typed(SaveMentorFeedback)],
    )
    .with_remaining_tasks(|w: &Work| {
        if w.saved.is_none() {
            vec!["Save the review with save_mentor_feedback".into()]
        } else {
            Vec::new()
        }
    });
    let system = format!(
        "You are a kind reading mentor. Write a {} review in {}: praise concretely (numbers, quote one insight), \
         optionally reflect on one insight, and always end with one small, concrete next step. Never scold a \
         quiet period. Call get_mentor_context(period_days={days}) first, then save_mentor_feedback.",
        feedback_type.as_str(),
        if lang == "ja" { "Japanese" } else { "English" }
    );
    let work = Work {
        context: context.clone(),
        known,
        saved: None,
    };
    let messages = vec![
        ChatMessage::system(system),
        ChatMessage::user(format!("/review {}", feedback_type.as_str())),
    ];
    match agent.run(model.as_ref(), messages, work, ctx.ledger).await {
        Ok(r) => r.state.saved,
        Err(e) => {
            tracing::warn!(error = %e, "the Mentor failed; using the template review");
            None
        }
    }
}
