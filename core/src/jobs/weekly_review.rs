//! The weekly review the bot sends by itself to users who opted in (`/review weekly on`):
//! every Sunday at 19:00 in the user's time zone. `kaiwa run` calls [`send_due_reviews`]
//! every minute; the review is an ordinary mentor turn whose update id names the user and
//! the week, so the store's deduplication sends each week's review once, across restarts.

use crate::message::{Body, Incoming, Platform, UserRef};
use crate::orchestrator::{Orchestrator, OrchestratorError, Outbox};
use chrono::{DateTime, Datelike, Days, NaiveDate, TimeZone, Timelike, Utc, Weekday};
use std::sync::Arc;

pub const REVIEW_WEEKDAY: Weekday = Weekday::Sun;
pub const REVIEW_HOUR: u32 = 19;
/// A conversation in another flow touched more recently than this is not interrupted (the
/// review waits for the next check).
pub const QUIET_MINUTES: i64 = 30;

/// The latest review moment at or before `now` in `timezone`, if it came after `since` (the
/// opt-in): its local date names the week's review.
pub fn due_review(now: DateTime<Utc>, timezone: &str, since: DateTime<Utc>) -> Option<NaiveDate> {
    // zones are checked when a reader opts in; a row older than that check reads as UTC
    let tz: chrono_tz::Tz = timezone.parse().unwrap_or_else(|_| {
        // checked every minute: said once per zone, not every minute
        if first_warning(timezone) {
            tracing::warn!(
                timezone,
                "unknown time zone in a weekly-review subscription; using UTC"
            );
        }
        chrono_tz::UTC
    });
    let local = now.with_timezone(&tz);
    let back =
        (local.weekday().num_days_from_monday() + 7 - REVIEW_WEEKDAY.num_days_from_monday()) % 7;
    let mut date = local
        .date_naive()
        .checked_sub_days(Days::new(back.into()))?;
    if back == 0 && local.hour() < REVIEW_HOUR {
        date = date.checked_sub_days(Days::new(7))?;
    }
    let moment = tz
        .from_local_datetime(&date.and_hms_opt(REVIEW_HOUR, 0, 0)?)
        .earliest()?
        .with_timezone(&Utc);
    (moment > since).then_some(date)
}

/// True the first time `timezone` is warned about in this process (at most 64 zones are
/// remembered; past that every warning is said once more).
fn first_warning(timezone: &str) -> bool {
    static WARNED: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let mut warned = WARNED.lock().unwrap_or_else(|p| p.into_inner());
    if warned.iter().any(|z| z == timezone) {
        return false;
    }
    if warned.len() >= 64 {
        warned.clear();
    }
    warned.push(timezone.to_string());
    true
}

/// Sends every weekly review that is due through the outbox of its platform. Returns how
/// many were sent.
pub async fn send_due_reviews(
    orchestrator: &Orchestrator,
    now: DateTime<Utc>,
    outbox_for: impl Fn(Platform) -> Option<Arc<dyn Outbox>>,
) -> Result<usize, OrchestratorError> {
    if orchestrator
        .flows()
        .get(crate::flows::reading::mentor::ID)
        .is_none()
    {
        return Ok(0);
    }
    let store = orchestrator.store();
    let mut sent = 0;
    for sub in store.weekly_reviews().await? {
        let Some(date) = due_review(now, &sub.timezone, sub.since) else {
            continue;
        };
        let Some(outbox) = outbox_for(sub.key.platform) else {
            continue;
        };
        if let Some(active) = store.active_session(&sub.key).await?
            && active.flow != crate::flows::reading::mentor::ID
            && (now - active.updated_at).num_minutes() < QUIET_MINUTES
        {
            tracing::debug!(user = %sub.key.user, "weekly review waits: a conversation is in progress");
            continue;
        }
        let incoming = Incoming {
            platform: sub.key.platform,
            chat: sub.key.chat.clone(),
            thread: sub.key.thread.clone(),
            user: UserRef {
                id: sub.key.user.clone(),
                display_name: sub.key.user.clone(),
                language: None,
            },
            message_id: format!("weekly-review:{}:{date}", sub.key.user),
            body: Body::Command {
                name: "review".into(),
                args: "weekly".into(),
            },
            flow: Some(crate::flows::reading::mentor::ID.into()),
            flow_arg: None,
            shared: false,
        };
        let report = orchestrator.handle(incoming, outbox.as_ref()).await?;
        if !report.duplicate {
            tracing::info!(user = %sub.key.user, %date, "weekly review sent");
            sent += 1;
        }
    }
    Ok(sent)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s)
            .map(|d| d.with_timezone(&Utc))
            .unwrap_or_default()
    }

    #[test]
    fn the_review_is_due_from_sunday_evening_local_time() {
        let since = at("2026-11-18T00:00:00Z"); // a Wednesday
        // Sunday 2026-11-22 19:00 in Tokyo is 10:00 UTC
        assert_eq!(
            due_review(at("2026-11-22T09:59:00Z"), "Asia/Tokyo", since),
            None
        );
        let date = NaiveDate::from_ymd_opt(2026, 11, 22);
        assert_eq!(
            due_review(at("2026-11-22T10:00:00Z"), "Asia/Tokyo", since),
            date
        );
        // still the same week's review on Tuesday
        assert_eq!(
            due_review(at("2026-11-24T03:00:00Z"), "Asia/Tokyo", since),
            date
        );
        // in New York the same instant is still Sunday morning: not yet
        assert_eq!(
            due_review(at("2026-11-22T10:00:00Z"), "America/New_York", since),
            None
        );
        // an opt-in after the last review moment waits for the next one
        assert_eq!(
            due_review(
                at("2026-11-24T03:00:00Z"),
                "Asia/Tokyo",
                at("2026-11-23T00:00:00Z")
            ),
            None
        );
        // an unknown zone falls back to UTC
        assert_eq!(
            due_review(at("2026-11-22T19:00:00Z"), "Mars/Olympus", since),
            date
        );
    }
}

#[cfg(test)]
mod warning_tests {
    use super::*;

    #[test]
    fn an_unknown_zone_is_warned_about_once() {
        assert!(first_warning("Asia/Tokoy-test"));
        assert!(!first_warning("Asia/Tokoy-test"));
        assert!(first_warning("Mars/Olympus-test"));
    }
}
