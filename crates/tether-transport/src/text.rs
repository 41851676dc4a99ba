//! Text that came from a peer, made safe to print or log.

/// `text` (which may carry what a peer sent: a close's reason, a name it announced) made
/// safe to print: control characters escaped as Rust writes them (`\n`, `\u{1b}`: a
/// newline would start a forged log line, an escape sequence would drive the terminal),
/// bidirectional-text controls as `\u{..}` (they reorder what a reader sees), and at most
/// `max_chars` characters, then `…`.
pub fn printable(text: &str, max_chars: usize) -> String {
    let mut out = String::with_capacity(text.len().min(max_chars.saturating_add(8)));
    for (i, c) in text.chars().enumerate() {
        if i == max_chars {
            out.push('…');
            break;
        }
        let bidi = matches!(
            c,
            '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'
        );
        if c.is_control() {
            out.extend(c.escape_default());
        } else if bidi {
            out.extend(c.escape_unicode());
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::printable;

    /// A forged log line cannot start or be reordered: newlines, carriage returns, escapes
    /// and bidirectional controls are escaped, and the text is cut short.
    #[test]
    fn a_peers_text_is_made_printable() {
        let forged = "x\n2026-11-27T12:00:00Z  INFO tether_router::run: link up: router 'evil'\r\u{202e}olleh\u{1b}[31m";
        let p = printable(forged, 160);
        assert!(!p.chars().any(|c| c.is_control()), "{p:?}");
        assert!(!p.contains('\u{202e}'), "{p:?}");
        assert!(
            p.contains("x\\n2026") && p.contains("\\u{202e}olleh\\u{1b}[31m"),
            "{p}"
        );
        let long = "é".repeat(1000);
        assert_eq!(printable(&long, 160).chars().count(), 161);
        assert_eq!(printable("router stopping", 160), "router stopping");
        assert_eq!(printable("/robot1/pose é", usize::MAX), "/robot1/pose é");
    }
}
