//! Greeter (seed 000 / 001): greets, then sets language, country and time zone with the
//! tools `set_language`, `set_country`, `set_timezone`. The section is derived from the state
//! ([`section`], the seed's `getSection`), never stored.
//!
//! The language is always offered as options (buttons). The country is resolved against a
//! built-in table (English and Japanese names, ISO codes); the time zone is inferred from it
//! and validated with chrono-tz — a country with several zones asks which one. A country or
//! zone not recognised after the second ask is kept as the applicant wrote it, unresolved
//! (the admins are told), and no zone is invented. With a model, the Greeter agent reads the
//! applicant's free text; without one, the same tools are applied by rules.

use super::state::InterviewState;
use crate::agent::{Agent, AgentLoopResult, LlmLedger, ToolError, ToolOutput, TypedTool, typed};
use crate::llm::{ChatMessage, ChatModel};
use schemars::JsonSchema;
use serde::Deserialize;
use std::str::FromStr;

pub const AGENT: &str = "greeter";

/// The time zone asked for in words (a country whose zones are not known).
pub(super) fn zone_question_in_words(lang: &str) -> String {
    crate::i18n::pick(
        lang,
        "Which time zone are you in? Please write it like Europe/Berlin or America/New_York.",
        "どのタイムゾーンにお住まいですか？ Europe/Berlin や America/New_York のように書いてください。",
    )
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Section {
    Language,
    Country,
    Timezone,
    Completed,
}

/// The seed's `getSection`.
pub fn section(state: &InterviewState) -> Section {
    if state.language.is_none() {
        Section::Language
    } else if state.country.is_none() && state.country_unresolved.is_none() {
        Section::Country
    } else if state.timezone.is_none() && state.timezone_unresolved.is_none() {
        Section::Timezone
    } else {
        Section::Completed
    }
}

/// (ISO code, English name, Japanese name, IANA zones)
const COUNTRIES: &[(&str, &str, &str, &[&str])] = &[
    ("JP", "Japan", "日本", &["Asia/Tokyo"]),
    (
        "US",
        "United States",
        "アメリカ",
        &[
            "America/New_York",
            "America/Chicago",
            "America/Denver",
            "America/Los_Angeles",
            "America/Anchorage",
            "Pacific/Honolulu",
        ],
    ),
    ("GB", "United Kingdom", "イギリス", &["Europe/London"]),
    (
        "CA",
        "Canada",
        "カナダ",
        &[
            "America/Toronto",
            "America/Winnipeg",
            "America/Edmonton",
            "America/Vancouver",
            "America/Halifax",
        ],
    ),
    (
        "AU",
        "Australia",
        "オーストラリア",
        &[
            "Australia/Sydney",
            "Australia/Brisbane",
            "Australia/Adelaide",
            "Australia/Perth",
        ],
    ),
    (
        "NZ",
        "New Zealand",
        "ニュージーランド",
        &["Pacific/Auckland"],
    ),
    ("DE", "Germany", "ドイツ", &["Europe/Berlin"]),
    ("FR", "France", "フランス", &["Europe/Paris"]),
    ("ES", "Spain", "スペイン", &["Europe/Madrid"]),
    ("IT", "Italy", "イタリア", &["Europe/Rome"]),
    ("NL", "Netherlands", "オランダ", &["Europe/Amsterdam"]),
    ("SE", "Sweden", "スウェーデン", &["Europe/Stockholm"]),
    ("CH", "Switzerland", "スイス", &["Europe/Zurich"]),
    ("IE", "Ireland", "アイルランド", &["Europe/Dublin"]),
    ("PL", "Poland", "ポーランド", &["Europe/Warsaw"]),
    ("PT", "Portugal", "ポルトガル", &["Europe/Lisbon"]),
    ("CN", "China", "中国", &["Asia/Shanghai"]),
    ("KR", "South Korea", "韓国", &["Asia/Seoul"]),
    ("TW", "Taiwan", "台湾", &["Asia/Taipei"]),
    ("HK", "Hong Kong", "香港", &["Asia/Hong_Kong"]),
    ("SG", "Singapore", "シンガポール", &["Asia/Singapore"]),
    ("TH", "Thailand", "タイ", &["Asia/Bangkok"]),
    ("VN", "Vietnam", "ベトナム", &["Asia/Ho_Chi_Minh"]),
    ("PH", "Philippines", "フィリピン", &["Asia/Manila"]),
    ("MY", "Malaysia", "マレーシア", &["Asia/Kuala_Lumpur"]),
    (
        "ID",
        "Indonesia",
        "インドネシア",
        &["Asia/Jakarta", "Asia/Makassar", "Asia/Jayapura"],
    ),
    ("IN", "India", "インド", &["Asia/Kolkata"]),
    (
        "BR",
        "Brazil",
        "ブラジル",
        &["America/Sao_Paulo", "America/Manaus", "America/Fortaleza"],
    ),
    (
        "MX",
        "Mexico",
        "メキシコ",
        &["America/Mexico_City", "America/Tijuana", "America/Cancun"],
    ),
    (
        "AR",
        "Argentina",
        "アルゼンチン",
        &["America/Argentina/Buenos_Aires"],
    ),
    (
        "RU",
        "Russia",
        "ロシア",
        &[
            "Europe/Moscow",
            "Asia/Yekaterinburg",
            "Asia/Novosibirsk",
            "Asia/Vladivostok",
        ],
    ),
    ("TR", "Turkey", "トルコ", &["Europe/Istanbul"]),
    (
        "AE",
        "United Arab Emirates",
        "アラブ首長国連邦",
        &["Asia/Dubai"],
    ),
    ("IL", "Israel", "イスラエル", &["Asia/Jerusalem"]),
    ("EG", "Egypt", "エジプト", &["Africa/Cairo"]),
    ("ZA", "South Africa", "南アフリカ", &["Africa/Johannesburg"]),
    ("NG", "Nigeria", "ナイジェリア", &["Africa/Lagos"]),
    ("KE", "Kenya", "ケニア", &["Africa/Nairobi"]),
    ("UA", "Ukraine", "ウクライナ", &["Europe/Kyiv"]),
    ("FI", "Finland", "フィンランド", &["Europe/Helsinki"]),
    ("NO", "Norway", "ノルウェー", &["Europe/Oslo"]),
    ("DK", "Denmark", "デンマーク", &["Europe/Copenhagen"]),
];

const ALIASES: &[(&str, &str)] = &[
    ("usa", "US"),
    ("america", "US"),
    ("united states of america", "US"),
    ("米国", "US"),
    ("uk", "GB"),
    ("england", "GB"),
    ("britain", "GB"),
    ("英国", "GB"),
    ("korea", "KR"),
    ("にほん", "JP"),
    ("にっぽん", "JP"),
    ("日本国", "JP"),
    ("holland", "NL"),
    ("uae", "AE"),
    ("中華人民共和国", "CN"),
    ("大韓民国", "KR"),
];

/// Countries offered when a typed one is not known.
pub const SUGGESTED_COUNTRIES: [&str; 6] = ["JP", "US", "GB", "DE", "KR", "IN"];

/// Every country and territory of the time-zone database (tzdata's `iso3166.tab` and
/// `zone.tab`, public domain, shipped in `core/data/tzdata`): code, English name, zones.
/// The curated list above comes first (Japanese names, the zones people pick); this
/// covers the rest, so a zone is derived for any country, never assumed.
struct World {
    countries: Vec<(&'static str, &'static str, Vec<&'static str>)>,
}

static WORLD: std::sync::LazyLock<World> = std::sync::LazyLock::new(|| {
    const ISO3166: &str = include_str!("../../../data/tzdata/iso3166.tab");
    const ZONES: &str = include_str!("../../../data/tzdata/zone.tab");
    let rows = |text: &'static str| {
        text.lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .map(|l| l.split('\t').collect::<Vec<&'static str>>())
    };
    let mut countries: Vec<(&'static str, &'static str, Vec<&'static str>)> = rows(ISO3166)
        .filter_map(|r| Some((*r.first()?, *r.get(1)?, Vec::new())))
        .collect();
    for row in rows(ZONES) {
        let (Some(code), Some(zone)) = (row.first(), row.get(2)) else {
            continue;
        };
        if let Some(country) = countries.iter_mut().find(|c| c.0 == *code)
            && is_valid_zone(zone)
        {
            country.2.push(zone);
        }
    }
    World { countries }
});

/// The most zones offered as buttons (Discord shows 25 per message).
pub const MAX_ZONE_CHOICES: usize = 24;

/// Resolves a country name (English, Japanese) or ISO code to its code.
/// The country `input` is, when it is nothing but a country's name, code or common alias
/// ("Japan", "JP", "日本", "USA"): what the code reads without a model. A sentence ("I live
/// in Japan") may say more, and goes to the Greeter.
pub fn country_named(input: &str) -> Option<&'static str> {
    let t = input.trim().trim_end_matches(['.', '。', '!', '！']).trim();
    let lower = t.to_lowercase();
    if let Some((code, ..)) = COUNTRIES.iter().find(|(code, en, ja, _)| {
        code.eq_ignore_ascii_case(t) || en.to_lowercase() == lower || *ja == t
    }) {
        return Some(code);
    }
    ALIASES
        .iter()
        .find(|(alias, _)| *alias == lower)
        .and_then(|(_, code)| COUNTRIES.iter().find(|c| c.0 == *code).map(|c| c.0))
}

pub fn resolve_country(input: &str) -> Option<&'static str> {
    if let Some(code) = country_named(input) {
        return Some(code);
    }
    let t = input.trim().trim_end_matches(['.', '。', '!', '！']).trim();
    let lower = t.to_lowercase();
    // "I live in Japan", "日本に住んでいます"
    if let Some(c) = COUNTRIES
        .iter()
        .find(|(_, en, ja, _)| contains_word(&lower, &en.to_lowercase()) || t.contains(ja))
    {
        return Some(c.0);
    }
    // any other country of the time-zone database, by its English name or code
    let world = &WORLD.countries;
    world
        .iter()
        .find(|(code, name, _)| *code == t || name.to_lowercase() == lower)
        .or_else(|| {
            world
                .iter()
                .find(|(_, name, _)| contains_word(&lower, &name.to_lowercase()))
        })
        .map(|c| c.0)
}

/// The country and zone of a city the time-zone database names ("Tokyo", "New York",
/// "Buenos Aires"), or a Japanese city, alone or in a sentence ("I live in Berlin",
/// 「大阪に住んでいます」): a city says both.
pub fn city_named(input: &str) -> Option<(&'static str, &'static str)> {
    const JA_CITIES: [(&str, &str, &str); 14] = [
        ("東京", "JP", "Asia/Tokyo"),
        ("大阪", "JP", "Asia/Tokyo"),
        ("京都", "JP", "Asia/Tokyo"),
        ("名古屋", "JP", "Asia/Tokyo"),
        ("横浜", "JP", "Asia/Tokyo"),
        ("札幌", "JP", "Asia/Tokyo"),
        ("福岡", "JP", "Asia/Tokyo"),
        ("神戸", "JP", "Asia/Tokyo"),
        ("仙台", "JP", "Asia/Tokyo"),
        ("ソウル", "KR", "Asia/Seoul"),
        ("ロンドン", "GB", "Europe/London"),
        ("ニューヨーク", "US", "America/New_York"),
        ("パリ", "FR", "Europe/Paris"),
        ("ベルリン", "DE", "Europe/Berlin"),
    ];
    if let Some((_, code, zone)) = JA_CITIES.iter().find(|(city, ..)| input.contains(city)) {
        return Some((code, zone));
    }
    let lower = input.to_lowercase();
    WORLD.countries.iter().find_map(|(code, _, zones)| {
        zones
            .iter()
            .find(|zone| {
                let city = zone.rsplit('/').next().unwrap_or(zone).replace('_', " ");
                city.len() >= 4 && contains_word(&lower, &city.to_lowercase())
            })
            .map(|zone| (*code, *zone))
    })
}

/// Whether `input` could name a place we do not know ("New Atlantis", 「ナウル共和国」): a few
/// words of letters, never an address, a number or a link ("alice@example.com", "2024").
pub fn could_be_a_place(input: &str) -> bool {
    let t = input.trim();
    let letters = t.chars().filter(|c| c.is_alphabetic()).count();
    letters >= 2
        && t.chars().count() <= 60
        && t.split_whitespace().count() <= 6
        && t.chars().all(|c| {
            c.is_alphabetic()
                || c.is_whitespace()
                || matches!(c, '-' | '\'' | '’' | '.' | ',' | '(' | ')' | '・' | '。')
        })
}

fn contains_word(hay: &str, word: &str) -> bool {
    hay.match_indices(word).any(|(i, _)| {
        let before = hay[..i].chars().next_back();
        let after = hay[i + word.len()..].chars().next();
        before.is_none_or(|c| !c.is_alphanumeric()) && after.is_none_or(|c| !c.is_alphanumeric())
    })
}

pub fn country_name(code: &str, lang: &str) -> String {
    COUNTRIES
        .iter()
        .find(|c| c.0 == code)
        .map(|c| if lang == "ja" { c.2 } else { c.1 }.to_string())
        .or_else(|| {
            // the database has English names only
            WORLD
                .countries
                .iter()
                .find(|c| c.0 == code)
                .map(|c| c.1.to_string())
        })
        .unwrap_or_else(|| code.to_string())
}

/// The zones of a known country (empty for an unknown one; at most [`MAX_ZONE_CHOICES`]).
pub fn zones_of(code: &str) -> Vec<&'static str> {
    COUNTRIES
        .iter()
        .find(|c| c.0 == code)
        .map(|c| c.3.to_vec())
        .or_else(|| {
            WORLD
                .countries
                .iter()
                .find(|c| c.0 == code)
                .map(|c| c.2.iter().take(MAX_ZONE_CHOICES).copied().collect())
        })
        .unwrap_or_default()
}

/// Whether `name` is a valid IANA zone (chrono-tz).
pub fn is_valid_zone(name: &str) -> bool {
    chrono_tz::Tz::from_str(name).is_ok()
}

/// Detects a language choice in free text.
pub fn detect_language(text: &str) -> Option<&'static str> {
    let t = text.trim().to_lowercase();
    if ["ja", "jp", "japanese", "日本語", "にほんご", "2"].contains(&t.as_str()) {
        return Some("ja");
    }
    if ["en", "english", "英語", "1"].contains(&t.as_str()) {
        return Some("en");
    }
    if t.chars()
        .any(|c| ('\u{3040}'..='\u{30ff}').contains(&c) || ('\u{4e00}'..='\u{9fff}').contains(&c))
    {
        return Some("ja");
    }
    None
}

/// The outcome of one greeter step for the caller to apply.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GreeterWork {
    pub state: InterviewState,
    /// A question the agent asked (sent by the caller).
    pub asked: Option<String>,
}

#[derive(Deserialize, JsonSchema)]
struct SetLanguage {
    /// ISO 639-1 code: "en" or "ja".
    language: String,
}
struct SetLanguageTool;
impl TypedTool<GreeterWork> for SetLanguageTool {
    type Args = SetLanguage;
    const NAME: &'static str = "set_language";
    fn description(&self) -> String {
        "Set the applicant's language (en or ja).".into()
    }
    async fn run(&self, w: &mut GreeterWork, args: SetLanguage) -> Result<ToolOutput, ToolError> {
        match args.language.as_str() {
            "en" | "ja" => {
                w.state.language = Some(args.language);
                Ok(ToolOutput::ok("language set"))
            }
            other => Err(ToolError::Rejected(format!(
                "unsupported language {other:?}; use en or ja"
            ))),
        }
    }
}

#[derive(Deserialize, JsonSchema)]
struct SetCountry {
    /// The country the applicant lives in: ISO 3166 alpha-2 code or its name.
    country: String,
}
struct SetCountryTool;
impl TypedTool<GreeterWork> for SetCountryTool {
    type Args = SetCountry;
    const NAME: &'static str = "set_country";
    fn description(&self) -> String {
        "Set the country the applicant lives in.".into()
    }
    async fn run(&self, w: &mut GreeterWork, args: SetCountry) -> Result<ToolOutput, ToolError> {
        let Some(code) = resolve_country(&args.country).map(str::to_string) else {
            // never stored as typed: the applicant is asked again
            return Err(ToolError::InvalidArguments(format!(
                "unknown country {:?}; ask the applicant again which country they live in",
                args.country
            )));
        };
        w.state.country = Some(code.clone());
        Ok(ToolOutput::ok(format!(
            "country set to {code}; now call set_timezone"
        )))
    }
}

#[derive(Deserialize, JsonSchema)]
struct SetTimezone {
    /// An IANA zone; omit it to infer the zone from the country.
    #[serde(default)]
    timezone: Option<String>,
}
struct SetTimezoneTool;
impl TypedTool<GreeterWork> for SetTimezoneTool {
    type Args = SetTimezone;
    const NAME: &'static str = "set_timezone";
    fn description(&self) -> String {
        "Set the applicant's time zone; without an argument it is inferred from the country.".into()
    }
    async fn run(&self, w: &mut GreeterWork, args: SetTimezone) -> Result<ToolOutput, ToolError> {
        let zone = match args.timezone {
            Some(z) if is_valid_zone(&z) => z,
            Some(z) => {
                return Err(ToolError::Rejected(format!(
                    "{z:?} is not an IANA time zone"
                )));
            }
            None => {
                let zones = zones_of(w.state.country.as_deref().unwrap_or_default());
                match zones.as_slice() {
                    // never assumed: the applicant says it
                    [] => {
                        return Err(ToolError::Rejected(
                            "no time zone is known for this country; ask the applicant which time zone they are in (an IANA name such as Europe/Berlin), then call set_timezone with it".into(),
                        ));
                    }
                    [one] => one.to_string(),
                    many => {
                        return Err(ToolError::Rejected(format!(
                            "this country has several time zones ({}); ask the applicant which one, then call set_timezone with it",
                            many.join(", ")
                        )));
                    }
                }
            }
        };
        w.state.timezone = Some(zone.clone());
        Ok(ToolOutput::ok(format!("time zone set to {zone}")))
    }
}

#[derive(Deserialize, JsonSchema)]
struct Ask {
    /// The message for the applicant.
    question: String,
}
struct AskTool;
impl TypedTool<GreeterWork> for AskTool {
    type Args = Ask;
    const NAME: &'static str = "ask";
    fn description(&self) -> String {
        "Send a question or message to the applicant and wait for the answer.".into()
    }
    async fn run(&self, w: &mut GreeterWork, args: Ask) -> Result<ToolOutput, ToolError> {
        if args.question.trim().is_empty() {
            return Err(ToolError::InvalidArguments("the question is empty".into()));
        }
        w.asked = Some(args.question.clone());
        Ok(ToolOutput::ask(args.question))
    }
}

fn remaining(w: &GreeterWork) -> Vec<String> {
    let mut tasks = Vec::new();
    if w.state.language.is_none() {
        tasks.push("Set the user language using set_language".to_string());
    }
    if w.state.country.is_none() {
        tasks.push("Set the user country using set_country".to_string());
    }
    if w.state.timezone.is_none() {
        tasks.push("Set the timezone using set_timezone".to_string());
    }
    tasks
}

/// Runs the Greeter agent on the applicant's message. The loop ends at `ask` or once
/// everything is set (the caller then moves on to the Architect).
pub async fn run_model(
    model: &dyn ChatModel,
    state: InterviewState,
    form_title: &str,
    user_text: &str,
    ledger: &LlmLedger,
) -> Result<AgentLoopResult<GreeterWork>, crate::agent::AgentError> {
    let agent = Agent::new(
        AGENT,
        vec![
            typed(AskTool),
            typed(SetLanguageTool),
            typed(SetCountryTool),
            typed(SetTimezoneTool),
        ],
    )
    .with_remaining_tasks(|w: &GreeterWork| {
        // once everything is set the greeter is done even without a final text
        remaining(w)
    });
    let lang = state.language.clone().unwrap_or_else(|| "en".into());
    let system = format!(
        "You are the Greeter of the application {form_title:?}. Greet the applicant, then establish their \
         language (set_language), the country they live in (set_country) and their time zone (set_timezone, \
         inferred from the country). Speak {}. Use `ask` to ask the applicant something. Known so far: \
         language={:?}, country={:?}, timezone={:?}.",
        if lang == "ja" { "Japanese" } else { "English" },
        state.language,
        state.country,
        state.timezone
    );
    let messages = vec![ChatMessage::system(system), ChatMessage::user(user_text)];
    let work = GreeterWork { state, asked: None };
    agent.run(model, messages, work, ledger).await
}

#[cfg(test)]
mod tests {
    #[test]
    fn any_country_of_the_time_zone_database_resolves_and_has_its_zones() {
        // not in the curated list: one zone derived, several offered, none assumed
        assert_eq!(resolve_country("Peru"), Some("PE"));
        assert_eq!(zones_of("PE"), ["America/Lima"]);
        assert_eq!(resolve_country("I live in Ecuador"), Some("EC"));
        assert_eq!(zones_of("EC"), ["America/Guayaquil", "Pacific/Galapagos"]);
        assert_eq!(country_name("EC", "ja"), "Ecuador");
        assert_eq!(resolve_country("Atlantis"), None);
        assert!(could_be_a_place("New Atlantis") && could_be_a_place("ナウル共和国"));
        for not_a_place in ["alice@example.com", "2024", "https://x.y", "?", "a"] {
            assert!(!could_be_a_place(not_a_place), "{not_a_place}");
        }
        // the curated list still answers first
        assert_eq!(resolve_country("日本"), Some("JP"));
        assert_eq!(zones_of("JP"), ["Asia/Tokyo"]);
        for code in ["US", "RU", "CA", "BR", "AU", "MX"] {
            assert!(
                !zones_of(code).is_empty() && zones_of(code).len() <= 24,
                "{code}"
            );
        }
    }

    use super::*;

    #[test]
    fn countries_resolve_in_both_languages() {
        assert_eq!(resolve_country("Japan"), Some("JP"));
        assert_eq!(resolve_country("日本"), Some("JP"));
        assert_eq!(resolve_country("日本に住んでいます。"), Some("JP"));
        assert_eq!(resolve_country("I live in the United States"), Some("US"));
        assert_eq!(resolve_country("usa"), Some("US"));
        assert_eq!(resolve_country("de"), Some("DE"));
        assert_eq!(resolve_country("Atlantis"), None);
    }

    #[test]
    fn every_zone_in_the_table_is_a_real_zone() {
        for (code, _, _, zones) in COUNTRIES {
            assert!(!zones.is_empty(), "{code}");
            for z in *zones {
                assert!(is_valid_zone(z), "{code}: {z}");
            }
        }
    }

    #[test]
    fn a_city_says_its_country_and_zone() {
        for (said, found) in [
            ("I live in Tokyo", Some(("JP", "Asia/Tokyo"))),
            ("東京に住んでいます", Some(("JP", "Asia/Tokyo"))),
            ("New York", Some(("US", "America/New_York"))),
            ("near Los Angeles", Some(("US", "America/Los_Angeles"))),
            ("Berlin", Some(("DE", "Europe/Berlin"))),
            (
                "Buenos Aires",
                Some(("AR", "America/Argentina/Buenos_Aires")),
            ),
            ("somewhere nice", None),
        ] {
            assert_eq!(city_named(said), found, "{said}");
        }
    }

    #[test]
    fn the_section_is_derived_from_state() {
        let mut s = InterviewState::default();
        assert_eq!(section(&s), Section::Language);
        s.language = Some("ja".into());
        assert_eq!(section(&s), Section::Country);
        s.country = Some("JP".into());
        assert_eq!(section(&s), Section::Timezone);
        s.timezone = Some("Asia/Tokyo".into());
        assert_eq!(section(&s), Section::Completed);
    }

    #[tokio::test]
    async fn set_timezone_infers_or_asks_and_never_assumes() {
        let mut w = GreeterWork::default();
        w.state.country = Some("JP".into());
        SetTimezoneTool
            .run(&mut w, SetTimezone { timezone: None })
            .await
            .expect("inferred");
        assert_eq!(w.state.timezone.as_deref(), Some("Asia/Tokyo"));
        w.state.country = Some("US".into());
        w.state.timezone = None;
        let err = SetTimezoneTool
            .run(&mut w, SetTimezone { timezone: None })
            .await
            .err();
        assert!(matches!(err, Some(ToolError::Rejected(m)) if m.contains("America/Chicago")));
        // a country with no zone we know: asked, never assumed
        w.state.country = Some("Atlantis".into());
        let err = SetTimezoneTool
            .run(&mut w, SetTimezone { timezone: None })
            .await
            .err();
        assert!(matches!(err, Some(ToolError::Rejected(m)) if m.contains("ask the applicant")));
        assert_eq!(w.state.timezone, None);
        assert!(
            SetTimezoneTool
                .run(
                    &mut w,
                    SetTimezone {
                        timezone: Some("Mars/Olympus".into())
                    }
                )
                .await
                .is_err()
        );
    }
}
