//! Topic patterns in grants: `/`-separated levels, `*` matches exactly one level, `**` any
//! number of levels (zero included). Everything else matches itself.

/// True if `pattern` is acceptable in a grant: non-empty, no empty level except a leading
/// `/`, and wildcards only as whole levels (`a*` is not a wildcard and is refused, so a
/// grant never means something other than it seems).
pub fn valid_pattern(pattern: &str) -> bool {
    if pattern.is_empty() || pattern.len() > 1024 {
        return false;
    }
    let body = pattern.strip_prefix('/').unwrap_or(pattern);
    if body.is_empty() {
        return false;
    }
    body.split('/')
        .all(|l| !l.is_empty() && (l == "*" || l == "**" || !l.contains('*')) && !l.contains('\0'))
}

/// True if `topic` is covered by `pattern`.
pub fn pattern_matches(pattern: &str, topic: &str) -> bool {
    let split = |s: &str| -> Vec<String> {
        s.strip_prefix('/')
            .unwrap_or(s)
            .split('/')
            .map(str::to_string)
            .collect()
    };
    // A leading slash is part of the name: "/a" and "a" are different topics.
    if pattern.starts_with('/') != topic.starts_with('/') {
        return false;
    }
    let p = split(pattern);
    let t = split(topic);
    if t.iter().any(|l| l.is_empty()) {
        return false;
    }
    matches(&p, &t)
}

fn matches(p: &[String], t: &[String]) -> bool {
    match p.split_first() {
        None => t.is_empty(),
        Some((first, rest)) if first == "**" => {
            // Zero or more levels: try every split (patterns are short).
            (0..=t.len()).any(|k| matches(rest, &t[k..]))
        }
        Some((first, rest)) => match t.split_first() {
            None => false,
            Some((tf, tr)) => (first == "*" || first == tf) && matches(rest, tr),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcards() {
        let yes = [
            ("/robot1/cmd_vel", "/robot1/cmd_vel"),
            ("/robot1/*", "/robot1/cmd_vel"),
            ("/*/cmd_vel", "/robot2/cmd_vel"),
            ("/robot1/**", "/robot1/cmd_vel"),
            ("/robot1/**", "/robot1/a/b/c"),
            ("/robot1/**", "/robot1"),
            ("/**", "/anything/at/all"),
            ("/**/scan", "/scan"),
            ("/**/scan", "/a/b/scan"),
            ("/a/**/z", "/a/b/c/z"),
        ];
        for (p, t) in yes {
            assert!(pattern_matches(p, t), "{p} should cover {t}");
        }
        let no = [
            ("/robot1/*", "/robot1/a/b"),
            ("/robot1/*", "/robot1"),
            ("/robot1/cmd", "/robot1/cmd_vel"),
            ("/robot1/**", "/robot2/x"),
            ("/*/cmd_vel", "/cmd_vel"),
            ("/a/**/z", "/a/b/c"),
            ("/a", "a"),
            ("/a/*", "/a//b"),
        ];
        for (p, t) in no {
            assert!(!pattern_matches(p, t), "{p} should not cover {t}");
        }
    }

    #[test]
    fn patterns_are_validated() {
        for ok in ["/a", "/a/*", "/**", "a/b", "/a/**/b"] {
            assert!(valid_pattern(ok), "{ok}");
        }
        for bad in ["", "/", "//a", "/a//b", "/a*", "/a/b*c", "/a/"] {
            assert!(!valid_pattern(bad), "{bad}");
        }
    }
}
