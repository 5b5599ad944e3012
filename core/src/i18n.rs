//! The two languages Kaiwa speaks to users: [`pick`] chooses the Japanese text for `ja` and
//! the English text otherwise.

/// `ja` for Japanese, anything else English.
pub fn pick(lang: &str, en: &str, ja: &str) -> String {
    if lang == "ja" { ja } else { en }.to_string()
}
