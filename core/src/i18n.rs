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

/// Whether `text` is (partly) Japanese: kana or kanji.
pub fn has_japanese(text: &str) -> bool {
    text.chars()
        .any(|c| matches!(c, '\u{3040}'..='\u{30ff}' | '\u{4e00}'..='\u{9fff}'))
}
