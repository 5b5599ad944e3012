//! Reading-companion rows and the [`ReadingChange`]s a turn writes (seed 004): reading
//! records per user and book, insights, moods, profile entries (shared by Onboarding and
//! Reading), mentor feedback and recommendations. Every change is scoped to the session's
//! own user by the store; a flow cannot name another user.

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

macro_rules! text_enum {
    ($name:ident { $($variant:ident = $text:literal),+ $(,)? }) => {
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
        #[serde(rename_all = "snake_case")]
        pub enum $name { $($variant),+ }

        impl $name {
            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }
            pub fn parse(s: &str) -> Option<Self> {
                match s { $($text => Some($name::$variant),)+ _ => None }
            }
        }
    };
}

text_enum!(ReadingStatus { NotStarted = "not_started", Reading = "reading", Completed = "completed" });
text_enum!(InteractionMode { Freeform = "freeform", Guided = "guided" });
text_enum!(InsightKind { Learning = "learning", Impression = "impression", Question = "question", Connection = "connection" });
text_enum!(MoodPhase { Before = "before", After = "after" });
text_enum!(ProfileKind { Goal = "goal", Interest = "interest", BookWish = "book_wish", Other = "other", Language = "language" });
text_enum!(FeedbackType { Weekly = "weekly", Monthly = "monthly" });

/// What a reading turn changes, for the session's user.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum ReadingChange {
    /// Creates the record if missing (status and mode as given), else leaves it.
    OpenRecord {
        title: String,
        author: Option<String>,
        /// What a books API knows of it (JSON: year, subjects, link, provider).
        #[serde(default)]
        details: Option<String>,
    },
    SetStatus {
        title: String,
        status: ReadingStatus,
    },
    SetMode {
        title: String,
        mode: InteractionMode,
    },
    AddInsight {
        title: String,
        kind: InsightKind,
        text: String,
    },
    AddMood {
        title: String,
        phase: MoodPhase,
        label: String,
        score: u8,
    },
    AddProfileEntry {
        kind: ProfileKind,
        text: String,
    },
    AddMentorFeedback {
        feedback_type: FeedbackType,
        content: String,
    },
    AddRecommendation {
        title: String,
        reason: String,
    },
    /// Opts the user in to (or out of) the weekly review sent to the session's place.
    SetWeeklyReview {
        enabled: bool,
        timezone: String,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadingRecord {
    pub id: i64,
    pub title: String,
    pub author: Option<String>,
    /// What a books API knows of it (year, subjects, link, provider).
    #[serde(default)]
    pub details: Option<serde_json::Value>,
    pub status: ReadingStatus,
    pub mode: InteractionMode,
    pub started_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Insight {
    pub kind: InsightKind,
    pub text: String,
    pub at: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mood {
    pub phase: MoodPhase,
    pub label: String,
    pub score: u8,
    pub at: DateTime<Utc>,
}

/// A user who asked for the weekly review, and where to send it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WeeklyReviewSubscription {
    pub key: crate::message::SessionKey,
    /// IANA zone name.
    pub timezone: String,
    pub since: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProfileEntry {
    pub kind: ProfileKind,
    pub text: String,
    pub at: DateTime<Utc>,
}
