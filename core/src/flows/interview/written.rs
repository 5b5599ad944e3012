//! How applicants write the values a form asks for, read by [`super::reviewer::validate`]:
//! numbers in words ("five years", 「十五年」) and dates as people write them ("April 1,
//! 2027", 「2027年4月」, "ASAP", 「来月から」).

/// The first number `text` writes in words: English ("five", "twenty-three") or Japanese
/// numerals (「三」, 「十五」, 「二十」).
pub(super) fn number_in_words(text: &str) -> Option<u32> {
    const UNITS: [&str; 20] = [
        "zero",
        "one",
        "two",
        "three",
        "four",
        "five",
        "six",
        "seven",
        "eight",
        "nine",
        "ten",
        "eleven",
        "twelve",
        "thirteen",
        "fourteen",
        "fifteen",
        "sixteen",
        "seventeen",
        "eighteen",
        "nineteen",
    ];
    const TENS: [&str; 8] = [
        "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety",
    ];
    let lower = text.to_lowercase();
    let mut found: Option<u32> = None;
    for word in lower.split(|c: char| !c.is_ascii_alphabetic()) {
        let unit = UNITS.iter().position(|u| *u == word);
        let ten = TENS.iter().position(|t| *t == word);
        match (found, unit, ten) {
            // "twenty three": the unit after a ten
            (Some(n), Some(u), None) if n >= 20 && n % 10 == 0 && u < 10 => {
                return Some(n + u as u32);
            }
            (Some(n), _, _) if !word.is_empty() => return Some(n),
            (None, Some(u), _) => found = Some(u as u32),
            (None, None, Some(t)) => found = Some(20 + 10 * t as u32),
            _ => {}
        }
    }
    if found.is_some() {
        return found;
    }
    // Japanese numerals, the first run of them
    const DIGITS: &str = "〇一二三四五六七八九";
    let (mut total, mut current, mut seen) = (0u32, 0u32, false);
    for c in text.chars() {
        if let Some(d) = DIGITS.chars().position(|d| d == c) {
            current = d as u32;
        } else if c == '十' {
            total += current.max(1) * 10;
            current = 0;
        } else if c == '百' {
            total += current.max(1) * 100;
            current = 0;
        } else if seen {
            break;
        } else {
            continue;
        }
        seen = true;
    }
    seen.then_some(total + current)
}

pub(super) fn parse_date(text: &str) -> Option<chrono::NaiveDate> {
    let today = chrono::Utc::now().date_naive();
    parse_date_on(text, today)
}

/// [`parse_date`] on `today`: digits (2027-04-01, 2027/4/1, 2027年4月1日, a month
/// alone: its 1st), a month's English name with or without day and year (its next
/// occurrence), "as soon as possible" (today), "next month" (its 1st), a while from
/// today ("in two weeks", 「1ヶ月後」, "next week": [`after_a_while`]).
fn parse_date_on(text: &str, today: chrono::NaiveDate) -> Option<chrono::NaiveDate> {
    use chrono::{Datelike, NaiveDate};
    let cleaned: String = text
        .trim()
        .replace(['年', '月', '/', '.'], "-")
        .replace('日', "");
    let cleaned = cleaned.trim_end_matches('-');
    if let Ok(date) = NaiveDate::parse_from_str(cleaned, "%Y-%m-%d") {
        return Some(date);
    }
    // a year and a month: its first day
    if let Some((year, month)) = cleaned.split_once('-')
        && let (Ok(year), Ok(month)) = (year.trim().parse::<i32>(), month.trim().parse::<u32>())
        && year > 1900
    {
        return NaiveDate::from_ymd_opt(year, month, 1);
    }
    let lower = text.trim().to_lowercase();
    let lower = lower.trim_end_matches(['.', '!', '。', '！']);
    const NOW: [&str; 10] = [
        "asap",
        "as soon as possible",
        "immediately",
        "right away",
        "now",
        "today",
        "今すぐ",
        "すぐ",
        "即日",
        "今日",
    ];
    if NOW
        .iter()
        .any(|w| lower == *w || (!w.is_ascii() && lower.starts_with(w)))
    {
        return Some(today);
    }
    if lower == "next month" || lower.starts_with("来月") {
        return today
            .checked_add_months(chrono::Months::new(1))
            .and_then(|d| d.with_day(1));
    }
    if let Some(date) = after_a_while(lower, today) {
        return Some(date);
    }
    // a month's English name, a day and a year around it in any order
    const MONTHS: [&str; 12] = [
        "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
    ];
    let words: Vec<&str> = lower
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty())
        .collect();
    let months: Vec<u32> = words
        .iter()
        .filter_map(|w| {
            let at = MONTHS.iter().position(|m| w.starts_with(m))?;
            // "march" and "mar" but not "mark"
            let full = [
                "january",
                "february",
                "march",
                "april",
                "may",
                "june",
                "july",
                "august",
                "september",
                "october",
                "november",
                "december",
            ][at];
            (w.len() == 3 || full.starts_with(w) || *w == "sept").then_some(at as u32 + 1)
        })
        .collect();
    // "I may start in June": "may" the verb beside another month
    let month = months
        .iter()
        .copied()
        .find(|m| *m != 5)
        .or(months.first().copied())?;
    let mut day = None;
    let mut year = None;
    for w in &words {
        let digits = w.trim_end_matches(|c: char| c.is_ascii_alphabetic());
        let Ok(n) = digits.parse::<i32>() else {
            continue;
        };
        if digits.len() == 4 {
            year = Some(n);
        } else if (1..=31).contains(&n) && day.is_none() {
            day = Some(n as u32);
        }
    }
    let day = day.unwrap_or(1);
    match year {
        Some(year) => NaiveDate::from_ymd_opt(year, month, day),
        None => {
            let this = NaiveDate::from_ymd_opt(today.year(), month, day)?;
            if this >= today {
                Some(this)
            } else {
                NaiveDate::from_ymd_opt(today.year() + 1, month, day)
            }
        }
    }
}

/// A start a while from `today`: "next week" and 「来週」 (its Monday), "in two weeks", "in
/// 10 days", "in a month", "a couple of weeks", 「2週間後」, 「三ヶ月後」, 「10日後から」.
fn after_a_while(lower: &str, today: chrono::NaiveDate) -> Option<chrono::NaiveDate> {
    use chrono::{Datelike, Days, Months};
    if lower == "next week" || lower.starts_with("来週") {
        let to_monday = 7 - u64::from(today.weekday().num_days_from_monday());
        return today.checked_add_days(Days::new(to_monday));
    }
    let (count, unit) = if crate::i18n::has_japanese(lower) {
        let at = lower.find('後')?;
        let before = &lower[..at];
        let unit = ["週間", "週", "ヶ月", "か月", "カ月", "ケ月", "ヵ月", "日"]
            .into_iter()
            .find(|u| before.ends_with(u))?;
        let number = before[..before.len() - unit.len()].trim();
        let count = number
            .parse::<u32>()
            .ok()
            .or_else(|| number_in_words(number))?;
        (
            count,
            if unit == "日" {
                'd'
            } else if unit.starts_with('週') {
                'w'
            } else {
                'm'
            },
        )
    } else {
        let words: Vec<&str> = lower
            .split(|c: char| !c.is_ascii_alphanumeric())
            .filter(|w| !w.is_empty())
            .collect();
        // one number or "a" before a unit, and nothing that says a month's name
        let at = words
            .iter()
            .position(|w| matches!(*w, "day" | "days" | "week" | "weeks" | "month" | "months"))?;
        let before = words[..at].join(" ");
        let count = match before.rsplit(' ').next().unwrap_or_default() {
            "a" | "an" | "one" => 1,
            "couple" | "of" if before.contains("couple") => 2,
            "few" => 3,
            word => word
                .parse::<u32>()
                .ok()
                .or_else(|| number_in_words(&before))?,
        };
        let unit = words[at].chars().next().unwrap_or('d');
        (count, unit)
    };
    if count == 0 || count > 24 {
        return None;
    }
    match unit {
        'd' => today.checked_add_days(Days::new(u64::from(count))),
        'w' => today.checked_add_days(Days::new(7 * u64::from(count))),
        _ => today.checked_add_months(Months::new(count)),
    }
}

#[cfg(test)]
mod tests {
    use super::parse_date_on;
    use chrono::NaiveDate;

    #[test]
    fn a_start_a_while_from_today_is_read() {
        // a Friday
        let today = NaiveDate::from_ymd_opt(2026, 11, 27).expect("date");
        let day = |m, d| NaiveDate::from_ymd_opt(2026 + (m < 11) as i32, m, d);
        for (said, date) in [
            ("in two weeks", day(12, 11)),
            ("In 2 weeks.", day(12, 11)),
            ("in 10 days", day(12, 7)),
            ("in a month", day(12, 27)),
            ("a couple of weeks from now", day(12, 11)),
            ("next week", day(11, 30)),
            ("2週間後", day(12, 11)),
            ("三ヶ月後から", day(2, 27)),
            ("10日後", day(12, 7)),
            ("来週から", day(11, 30)),
            ("weeks", None),
            ("in 100 months", None),
        ] {
            assert_eq!(parse_date_on(said, today), date, "{said}");
        }
    }
}
