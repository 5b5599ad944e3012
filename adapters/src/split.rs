//! Splitting long replies into platform-sized messages (Telegram 4,096, Discord 2,000).
//!
//! Text is cut at the last paragraph break that fits, else the last line break, else the last
//! space, and only as a last resort inside a word; nothing is dropped and every piece is
//! within the limit as the platform measures it.

/// Splits `text` into pieces whose `measure` is at most `limit`. `measure` returns the cost of
/// one character (UTF-16 units for Telegram, the escaped length for HTML, 1 for Discord).
pub fn split_text(text: &str, limit: usize, measure: impl Fn(char) -> usize) -> Vec<String> {
    let limit = limit.max(8);
    let mut pieces = Vec::new();
    let mut rest = text.trim_matches('\n');
    while !rest.is_empty() {
        // the longest prefix within the limit, as a byte index
        let mut cost = 0;
        let mut fits = rest.len();
        for (i, c) in rest.char_indices() {
            cost += measure(c);
            if cost > limit {
                fits = i;
                break;
            }
        }
        if fits == rest.len() {
            pieces.push(rest.to_string());
            break;
        }
        let window = &rest[..fits];
        let cut = [window.rfind("\n\n"), window.rfind('\n'), window.rfind(' ')]
            .into_iter()
            .flatten()
            .find(|&i| i > 0)
            .unwrap_or(fits.max(first_char_len(rest)));
        let (head, tail) = rest.split_at(cut);
        pieces.push(head.trim_end().to_string());
        rest = tail.trim_start_matches(['\n', ' ']);
    }
    pieces.retain(|p| !p.is_empty());
    pieces
}

/// The most messages one reply becomes; the rest is cut with [`CUT_MARK`].
pub const MAX_PIECES: usize = 3;

/// Ends the last message of a reply that was cut.
pub const CUT_MARK: &str = "[…] (cut: the reply was too long / 長すぎるため以下は省略しました)";

/// [`split_text`], at most `max` pieces: past that the last piece is cut so that it ends
/// with [`CUT_MARK`] and stays within `limit`.
pub fn split_capped(
    text: &str,
    limit: usize,
    max: usize,
    measure: impl Fn(char) -> usize,
) -> Vec<String> {
    let mut pieces = split_text(text, limit, &measure);
    let max = max.max(1);
    if pieces.len() <= max {
        return pieces;
    }
    let rest = pieces.split_off(max - 1).join("\n\n");
    let mark: usize = CUT_MARK.chars().map(&measure).sum::<usize>() + 2 * measure('\n');
    let room = limit.saturating_sub(mark).max(8);
    let mut last = split_text(&rest, room, &measure)
        .into_iter()
        .next()
        .unwrap_or_default();
    last.push_str("\n\n");
    last.push_str(CUT_MARK);
    pieces.push(last);
    pieces
}

fn first_char_len(s: &str) -> usize {
    s.chars().next().map_or(1, char::len_utf8)
}

/// `text` cut to at most `max` characters, with an ellipsis when cut.
pub fn truncate(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let mut out: String = text.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reply_longer_than_three_messages_is_cut_with_a_mark() {
        let paragraph = "word ".repeat(300); // 1,500 characters
        let text = [paragraph.trim_end(); 9].join("\n\n"); // ~13,500
        let pieces = split_capped(&text, 2000, MAX_PIECES, |_| 1);
        assert_eq!(pieces.len(), 3);
        assert!(pieces.iter().all(|p| p.chars().count() <= 2000));
        assert!(pieces[2].ends_with(CUT_MARK), "{}", pieces[2]);
        // a reply that fits is left alone
        let short = split_capped("one\n\ntwo", 2000, MAX_PIECES, |_| 1);
        assert_eq!(short, ["one\n\ntwo"]);
        let three = [paragraph.trim_end(); 3].join("\n\n");
        assert_eq!(split_capped(&three, 2000, MAX_PIECES, |_| 1).len(), 3);
        assert!(!split_capped(&three, 2000, MAX_PIECES, |_| 1)[2].contains(CUT_MARK));
    }

    #[test]
    fn short_text_is_one_piece() {
        assert_eq!(split_text("hello", 100, |_| 1), vec!["hello"]);
        assert!(split_text("", 100, |_| 1).is_empty());
    }

    #[test]
    fn splits_on_paragraphs_first() {
        let text = format!(
            "{}\n\n{}\n\n{}",
            "a".repeat(40),
            "b".repeat(40),
            "c".repeat(40)
        );
        let pieces = split_text(&text, 90, |_| 1);
        assert_eq!(
            pieces,
            vec![
                format!("{}\n\n{}", "a".repeat(40), "b".repeat(40)),
                "c".repeat(40)
            ]
        );
    }

    #[test]
    fn falls_back_to_lines_spaces_and_hard_cuts() {
        let text = format!("{} {}", "x".repeat(30), "y".repeat(30));
        assert_eq!(
            split_text(&text, 40, |_| 1),
            vec!["x".repeat(30), "y".repeat(30)]
        );
        let word = "z".repeat(25);
        let pieces = split_text(&word, 10, |_| 1);
        assert_eq!(pieces, vec!["z".repeat(10), "z".repeat(10), "z".repeat(5)]);
    }

    #[test]
    fn nothing_is_lost_and_every_piece_fits() {
        let paragraph = "日本語の文章です。Some English words here & <there>. ".repeat(20);
        let text = vec![paragraph; 12].join("\n\n");
        let cost = |c: char| match c {
            '&' => 5,
            '<' | '>' => 4,
            c => c.len_utf16(),
        };
        let pieces = split_text(&text, 4096, cost);
        assert!(pieces.len() > 1);
        for p in &pieces {
            assert!(p.chars().map(cost).sum::<usize>() <= 4096);
        }
        let rejoined: String = pieces.concat().split_whitespace().collect();
        let original: String = text.split_whitespace().collect();
        assert_eq!(rejoined, original);
    }
}
