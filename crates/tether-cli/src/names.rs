//! Topic names on the command line: checked against ROS 2's rules and normalised, so that
//! `chatter` and `/chatter` are one topic and a typo is an error rather than a topic that
//! nobody else uses.
//!
//! The rules (ROS 2's `rcl_validate_topic_name` and `rmw_validate_full_topic_name`, without
//! the `~` and `{}` substitutions, which need a node): a name is made of tokens separated
//! by `/`; a token is letters, digits and `_`, does not start with a digit and holds no
//! `__`; a name does not end with `/` and holds no `//`; at most 255 bytes. A leading `/`
//! is implied: names are taken from the root.

/// Longest name, in bytes, after normalising (ROS 2 allows 255 less a DDS prefix).
pub(crate) const MAX_TOPIC_BYTES: usize = 255;

/// A topic name as given on the command line, checked and normalised (`chatter` →
/// `/chatter`); for clap's `value_parser`. The error says what is wrong and what would do.
pub(crate) fn topic(given: &str) -> Result<String, String> {
    check(given).map_err(|why| {
        let mut msg = format!("'{given}' is not a topic name: {why}");
        if let Some(s) = suggest(given) {
            msg.push_str(&format!("; try '{s}'"));
        }
        msg.push_str(
            " (names are tokens of letters, digits and _ separated by /; docs/cli.md#topic-names)",
        );
        msg
    })
}

/// A topic name as [`topic`] takes it, or a topic id as a secure realm announces it (`#`
/// and 64 hex digits: what `tether topics` shows of a topic whose name it cannot read), for
/// `tether info`.
pub(crate) fn topic_or_id(given: &str) -> Result<String, String> {
    if crate::listing::is_id(given) {
        return Ok(given.to_ascii_lowercase());
    }
    if given.starts_with('#') {
        return Err(format!(
            "'{given}' is not a topic id: an id is '#' and 64 hex digits, as `tether topics` \
             shows it (or give the topic's name)"
        ));
    }
    topic(given)
}

/// A grant pattern (`tether keys issue --pub/--sub`), rooted as topic names are: the
/// topic-name rules, with `*` (one level) and `**` (any depth) as whole levels. A pattern
/// no valid name can match (`bad topic`) would be a grant that never grants.
pub(crate) fn pattern(given: &str) -> Result<String, String> {
    let fail = |why: String| {
        format!(
            "'{given}' is not a grant pattern: {why} (topic names with '*' for one level and \
             '**' for any depth, each a whole level; docs/cli.md#topic-names)"
        )
    };
    // Each wildcard level stands in for a name level: the rest must make a topic name.
    let name: Vec<&str> = given
        .split('/')
        .map(|l| if l == "*" || l == "**" { "x" } else { l })
        .collect();
    let name = name.join("/");
    if let Some(l) = given
        .split('/')
        .find(|l| l.contains('*') && *l != "*" && *l != "**")
    {
        return Err(fail(format!("the level '{l}' has '*' within it")));
    }
    check(&name).map_err(fail)?;
    Ok(if given.starts_with('/') {
        given.to_string()
    } else {
        format!("/{given}")
    })
}

/// `given` normalised, or why it is not a name.
fn check(given: &str) -> Result<String, String> {
    if given.is_empty() {
        return Err("it is empty".into());
    }
    if given.starts_with('~') || given.contains(['{', '}']) {
        return Err("substitutions (~ and {}) need a ROS node; give the full name".into());
    }
    let name = if given.starts_with('/') {
        given.to_string()
    } else {
        format!("/{given}")
    };
    if name == "/" {
        return Err("'/' alone names no topic".into());
    }
    if name.contains("//") {
        return Err("it has an empty level ('//')".into());
    }
    if name.ends_with('/') {
        return Err("it ends with '/'".into());
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '_' || *c == '/'))
    {
        return Err(match c {
            ' ' => "it contains a space".to_string(),
            '*' => "'*' is for grant patterns (tether keys issue), not topic names".to_string(),
            c if c.is_control() => format!("it contains the control character {c:?}"),
            c => format!("it contains '{c}'"),
        });
    }
    for token in name[1..].split('/') {
        if token.starts_with(|c: char| c.is_ascii_digit()) {
            return Err(format!("the level '{token}' starts with a digit"));
        }
        if token.contains("__") {
            return Err(format!(
                "the level '{token}' contains '__' (reserved by ROS 2)"
            ));
        }
    }
    if name.len() > MAX_TOPIC_BYTES {
        return Err(format!(
            "it is {} bytes long, more than {MAX_TOPIC_BYTES}",
            name.len()
        ));
    }
    Ok(name)
}

/// A valid name close to `given`, if one is easy to make: other characters become `_`,
/// empty levels and a trailing `/` go, a level starting with a digit gets a `_` before it.
fn suggest(given: &str) -> Option<String> {
    if given.contains(['*', '~', '{', '}']) {
        return None;
    }
    let mapped: String = given
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '/' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let tokens: Vec<String> = mapped
        .split('/')
        .filter(|t| !t.is_empty())
        .map(|t| {
            let mut t = t.to_string();
            while t.contains("__") {
                t = t.replace("__", "_");
            }
            if t.starts_with(|c: char| c.is_ascii_digit()) {
                t.insert(0, '_');
            }
            t
        })
        .filter(|t| t != "_")
        .collect();
    if tokens.is_empty() {
        return None;
    }
    let s = format!("/{}", tokens.join("/"));
    (check(&s).is_ok() && s != given).then_some(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_topic_id_is_said_to_be_one() {
        let e = topic_or_id("#abc").unwrap_err();
        assert!(
            e.contains("is not a topic id") && e.contains("64 hex digits"),
            "{e}"
        );
        assert!(topic_or_id(&format!("#{}", "A".repeat(64))).is_ok());
    }

    #[test]
    fn grant_patterns_follow_the_topic_name_rules() {
        assert_eq!(pattern("robot1/**").unwrap(), "/robot1/**");
        assert_eq!(pattern("/a/*/b").unwrap(), "/a/*/b");
        assert_eq!(pattern("**").unwrap(), "/**");
        for bad in ["bad topic", "/a/b*", "/a//b", "/1a", "", "/a/", "/a__b/*"] {
            let e = pattern(bad).unwrap_err();
            assert!(e.contains("is not a grant pattern"), "{bad}: {e}");
        }
        assert!(pattern("bad topic").unwrap_err().contains("space"));
    }

    #[test]
    fn relative_names_are_taken_from_the_root() {
        assert_eq!(topic("chatter").unwrap(), "/chatter");
        assert_eq!(topic("/chatter").unwrap(), "/chatter");
        assert_eq!(topic("robot1/cmd_vel").unwrap(), "/robot1/cmd_vel");
        assert_eq!(topic("/_private/x2").unwrap(), "/_private/x2");
    }

    #[test]
    fn bad_names_are_refused_with_a_suggestion() {
        for (bad, why, hint) in [
            ("/my topic", "space", Some("/my_topic")),
            ("/a//b/", "'//'", Some("/a/b")),
            ("/a/b/", "ends with '/'", Some("/a/b")),
            ("", "empty", None),
            ("/", "alone", None),
            ("/2d/scan", "starts with a digit", Some("/_2d/scan")),
            ("/a__b", "'__'", Some("/a_b")),
            ("/robot-1", "'-'", Some("/robot_1")),
            ("/a/*", "grant patterns", None),
            ("~/x", "substitutions", None),
            ("/caf\u{e9}", "'\u{e9}'", Some("/caf_")),
        ] {
            let e = topic(bad).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
            match hint {
                Some(h) => assert!(e.contains(&format!("try '{h}'")), "{bad}: {e}"),
                None => assert!(!e.contains("try '"), "{bad}: {e}"),
            }
        }
        let id = format!("#{}", "a1".repeat(32));
        assert_eq!(topic_or_id(&id).unwrap(), id);
        assert!(topic(&id).unwrap_err().contains("contains '#'"));
        assert_eq!(topic_or_id("chatter").unwrap(), "/chatter");
        assert!(topic_or_id("#a1").is_err());
        let long = format!("/{}", "a".repeat(MAX_TOPIC_BYTES));
        assert!(topic(&long).unwrap_err().contains("bytes long"));
    }
}
