//! The light Markdown the flows write (`## heading`, `**bold**`, `- item`) rendered for
//! each platform: Discord shows it as it is, Telegram gets HTML ([`telegram_html`]), the
//! console plain text ([`plain`]). Nothing else is interpreted: a user's `*` or `<` stays
//! what it is.

/// Telegram HTML: text escaped, `**bold**` and heading lines in `<b>`.
pub fn telegram_html(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 16);
    for (i, line) in text.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
        }
        match heading(line) {
            Some(title) => {
                out.push_str("<b>");
                out.push_str(&bold(&escape_html(title), "<b>", "</b>"));
                out.push_str("</b>");
            }
            None => out.push_str(&bold(&escape_html(line), "<b>", "</b>")),
        }
    }
    out
}

/// Plain text: heading marks and `**` removed.
pub fn plain(text: &str) -> String {
    text.split('\n')
        .map(|line| bold(heading(line).unwrap_or(line), "", ""))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The title of a `#`–`###` heading line.
fn heading(line: &str) -> Option<&str> {
    let rest = line.trim_start_matches('#');
    let marks = line.len() - rest.len();
    ((1..=3).contains(&marks) && rest.starts_with(' ')).then(|| rest.trim())
}

/// `**x**` pairs replaced by `open x close` (an unpaired `**` stays as it is).
fn bold(line: &str, open: &str, close: &str) -> String {
    let parts: Vec<&str> = line.split("**").collect();
    if parts.len() < 3 {
        return line.to_string();
    }
    let pairs = (parts.len() - 1) / 2;
    let mut out = String::with_capacity(line.len());
    for (i, part) in parts.iter().enumerate() {
        if i > 0 {
            let inside_pair = i <= pairs * 2;
            out.push_str(match (inside_pair, i % 2) {
                (true, 1) => open,
                (true, _) => close,
                (false, _) => "**",
            });
        }
        out.push_str(part);
    }
    out
}

/// Escapes text for HTML (Telegram's HTML parse mode).
pub fn escape_html(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insights_render_for_each_platform() {
        let md = "## Kokoro\n- **impression** a quiet book (2026-11-01)\n- 3 < 4 & **x";
        assert_eq!(
            telegram_html(md),
            "<b>Kokoro</b>\n- <b>impression</b> a quiet book (2026-11-01)\n- 3 &lt; 4 &amp; **x"
        );
        assert_eq!(
            plain(md),
            "Kokoro\n- impression a quiet book (2026-11-01)\n- 3 < 4 & **x"
        );
        // what is not the flows' markup stays
        assert_eq!(plain("#hashtag and 2 * 3"), "#hashtag and 2 * 3");
        assert_eq!(telegram_html("a <b>"), "a &lt;b&gt;");
    }
}
