//! The two languages Kaiwa speaks to users: [`pick`] chooses the Japanese text for `ja` and
//! the English text otherwise.

/// `ja` for Japanese, anything else English.
pub fn pick(lang: &str, en: &str, ja: &str) -> String {
    if lang == "ja" { ja } else { en }.to_string()
}

/// A greeting and nothing else ("こんにちは", "Hello!"): not a book title, not a question.
pub fn is_greeting(text: &str) -> bool {
    let t = text
        .trim()
        .trim_end_matches(['。', '！', '!', '.', '~', '〜', 'ー', '?', '？'])
        .trim()
        .to_lowercase();
    matches!(
        t.as_str(),
        "こんにちは"
            | "こんにちわ"
            | "こんばんは"
            | "おはよう"
            | "おはようございます"
            | "はじめまして"
            | "やあ"
            | "どうも"
            | "hello"
            | "hi"
            | "hey"
            | "hiya"
            | "good morning"
            | "good afternoon"
            | "good evening"
            | "hello there"
            | "hi there"
    )
}

/// Whether `text` thanks (“thanks!”, "Thank you, that worked", 「ありがとうございます」,
/// 「助かりました」): a short message that says thanks, asks nothing and takes nothing back
/// ("Thanks, but it still doesn't work", 「ありがとう、でもできません」 are not).
pub fn is_thanks(text: &str) -> bool {
    let t = text.trim().to_lowercase();
    // 👍, 🙏, 🙇‍♀️ alone (with their skin tones and joiners)
    const THANKS_SIGNS: &str = "👍🙏🙇👌😊❤\u{fe0f}\u{200d}♂♀🏻🏼🏽🏾🏿 ";
    if !t.is_empty() && t.chars().all(|c| THANKS_SIGNS.contains(c)) {
        return true;
    }
    if t.contains(['?', '？']) || t.chars().count() > 40 || t.split_whitespace().count() > 6 {
        return false;
    }
    let words: Vec<&str> = t.split(|c: char| !c.is_alphanumeric()).collect();
    let takes_back = ["but", "not", "still", "however", "no"]
        .iter()
        .any(|w| words.contains(w))
        || [
            "n't",
            "でも",
            "けど",
            "しかし",
            "ない",
            "ません",
            "だめ",
            "ダメ",
            "まだ",
        ]
        .iter()
        .any(|w| t.contains(w));
    if takes_back {
        return false;
    }
    ["thanks", "thank", "thx", "ty", "cheers"]
        .iter()
        .any(|w| words.contains(w))
        || ["ありがと", "有難う", "助かりました", "助かります", "感謝"]
            .iter()
            .any(|w| t.contains(w))
}

/// The words of `lower` (text already in lower case): its runs of letters and digits, an
/// apostrophe kept within them ("don't"), punctuation and spaces between them dropped.
pub fn words(lower: &str) -> Vec<&str> {
    lower
        .split(|c: char| !(c.is_alphanumeric() || c == '\''))
        .filter(|w| !w.is_empty())
        .collect()
}

/// Whether `lower` (its [`words`] in `words`) says one of `en` (a word whole, a phrase of
/// several anywhere: "talk to") or of `ja` (anywhere: Japanese has no spaces).
pub fn says_any(lower: &str, words: &[&str], en: &[&str], ja: &[&str]) -> bool {
    en.iter()
        .any(|w| words.contains(w) || (w.contains(' ') && lower.contains(w)))
        || ja.iter().any(|w| lower.contains(w))
}

/// Whether `text` is (partly) Japanese: kana or kanji.
pub fn has_japanese(text: &str) -> bool {
    text.chars()
        .any(|c| matches!(c, '\u{3040}'..='\u{30ff}' | '\u{4e00}'..='\u{9fff}'))
}

/// The language `text` is plainly written in: Japanese with any kana or kanji, English
/// with two or more words of Latin letters and none; `None` for a name, a number, a word.
pub fn written_language(text: &str) -> Option<&'static str> {
    if crate::i18n::has_japanese(text) {
        return Some("ja");
    }
    let words = text
        .split_whitespace()
        .filter(|w| w.chars().filter(char::is_ascii_alphabetic).count() >= 2)
        .count();
    (words >= 2).then_some("en")
}

/// The words of Japanese text that carry its meaning: its runs of katakana or kanji
/// (hiragana is mostly grammar), in order.
pub fn kanji_katakana_words(text: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut run = String::new();
    for c in text.chars().chain(std::iter::once(' ')) {
        if matches!(c, '\u{30a0}'..='\u{30ff}' | '\u{3400}'..='\u{4dbf}' | '\u{4e00}'..='\u{9fff}' | '\u{f900}'..='\u{faff}')
        {
            run.push(c);
        } else if !run.is_empty() {
            words.push(std::mem::take(&mut run));
        }
    }
    words
}
