//! The light Markdown the flows write (`## heading`, `**bold**`, `- item`) rendered for
//! each platform: Discord shows it as it is, Telegram gets HTML ([`telegram_html`]), Slack
//! its mrkdwn ([`slack_mrkdwn`]), the console plain text ([`plain`]). Nothing else is
//! interpreted: a user's `*` or `<` stays what it is. What Slack sends is read back as the
//! user typed it ([`from_slack`]).

/// Telegram HTML: text escaped, `**bold**` and heading lines in `<b>`.
pub fn telegram_html(text: &str) -> String {
    escaped_with_bold(text, ("<b>", "</b>"), ("<b>", "</b>"))
}

/// Slack's mrkdwn: `&`, `<`, `>` escaped (Slack reads them as markup), `**bold**` and
/// heading lines in `*`.
pub fn slack_mrkdwn(text: &str) -> String {
    escaped_with_bold(text, ("*", "*"), ("", ""))
}

/// Each line escaped ([`escape_html`]), a heading's title between `heading`'s marks (its
/// own `**` pairs between `inner`'s), other lines' `**` pairs between `heading`'s.
fn escaped_with_bold(text: &str, heading_marks: (&str, &str), inner: (&str, &str)) -> String {
    let (open, close) = heading_marks;
    let mut out = String::with_capacity(text.len() + 16);
    for (i, line) in text.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
        }
        match heading(line) {
            Some(title) => {
                out.push_str(open);
                out.push_str(&bold(&escape_html(title), inner.0, inner.1));
                out.push_str(close);
            }
            None => out.push_str(&bold(&escape_html(line), open, close)),
        }
    }
    out
}

/// A message's text as Slack sends it, as the user typed it: links (`<https://x|x>`) as
/// their address, `&amp;`, `&lt;`, `&gt;` unescaped; mentions (`<@U123>`) stay.
pub fn from_slack(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find('<') {
        out.push_str(&rest[..start]);
        let after = &rest[start + 1..];
        let Some(end) = after.find('>') else {
            out.push_str(&rest[start..]);
            rest = "";
            break;
        };
        let inside = &after[..end];
        if inside.starts_with('@') || inside.starts_with('#') || inside.starts_with('!') {
            out.push('<');
            out.push_str(inside);
            out.push('>');
        } else {
            out.push_str(inside.split('|').next().unwrap_or(inside));
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    out.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
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
        assert_eq!(
            slack_mrkdwn(md),
            "*Kokoro*\n- *impression* a quiet book (2026-11-01)\n- 3 &lt; 4 &amp; **x"
        );
    }

    #[test]
    fn slack_text_is_read_as_typed() {
        assert_eq!(
            from_slack("see <https://example.com/a?b=1&amp;c=2|example.com> &lt;3 &amp; <@U1>"),
            "see https://example.com/a?b=1&c=2 <3 & <@U1>"
        );
        assert_eq!(from_slack("a < b"), "a < b");
        assert_eq!(from_slack("&amp;lt;"), "&lt;");
    }
}
