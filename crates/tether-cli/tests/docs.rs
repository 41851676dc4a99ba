//! The README and docs/ as a reader meets them: the README opens with the two set-up
//! commands and nothing else in its first block, and every link (and figure) points to a
//! file of this repository that exists: none leaves it.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn markdown_files() -> Vec<PathBuf> {
    let mut out = vec![root().join("README.md")];
    let mut dirs = vec![root().join("docs")];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "md") {
                out.push(p);
            }
        }
    }
    out
}

/// The targets of `[text](target)` and `![alt](target)` outside code blocks and spans.
fn links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        // Drop code spans: a link written inside backticks is not a link.
        let mut plain = String::new();
        for (i, part) in line.split('`').enumerate() {
            if i % 2 == 0 {
                plain.push_str(part);
            }
        }
        let mut rest = plain.as_str();
        while let Some(i) = rest.find("](") {
            let after = &rest[i + 2..];
            let Some(end) = after.find(')') else { break };
            out.push(after[..end].to_string());
            rest = &after[end..];
        }
        // Bare addresses count as links out too.
        for word in plain.split_whitespace() {
            if word.contains("://") {
                out.push(word.to_string());
            }
        }
    }
    out
}

#[test]
fn readme_opens_with_the_two_setup_commands() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let mut lines = readme.lines().skip_while(|l| !l.starts_with("```"));
    assert!(lines.next().is_some(), "README has no code block");
    let block: Vec<&str> = lines
        .take_while(|l| !l.starts_with("```"))
        .filter(|l| !l.trim().is_empty())
        .collect();
    assert_eq!(block.len(), 2, "README's first block: {block:?}");
    assert!(block[0].contains("tether -- demo"), "{}", block[0]);
    assert!(block[1].starts_with("./scripts/test"), "{}", block[1]);
    let before: Vec<&str> = readme
        .lines()
        .take_while(|l| !l.starts_with("```"))
        .filter(|l| !l.trim().is_empty())
        .collect();
    assert_eq!(
        before,
        ["# tether"],
        "nothing comes before the two commands"
    );
}

#[test]
fn every_link_stays_in_the_repository_and_resolves() {
    let mut bad = Vec::new();
    let files = markdown_files();
    assert!(files.len() > 5, "docs/ went missing: {files:?}");
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        for link in links(&text) {
            let target = link.split('#').next().unwrap();
            if link.contains("://") || link.starts_with("//") || link.starts_with("mailto:") {
                bad.push(format!("{}: {link} leaves the repository", file.display()));
            } else if !target.is_empty() && !file.parent().unwrap().join(target).exists() {
                bad.push(format!("{}: {link} does not exist", file.display()));
            }
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

#[test]
fn the_link_checker_sees_links() {
    let found = links(
        "a [b](c.md#x) and ![f](g.svg) `[no](skip)` see https://example.org\n```\n[no](x)\n```",
    );
    assert_eq!(found, ["c.md#x", "g.svg", "https://example.org"]);
}

/// Every test that skips says so through `tether_testkit::skip!`, which lists it for the
/// suite's summary (`scripts/test`: "N skipped"): a test that only printed its reason was
/// counted as passed with the tests that ran (a new user's review, not root).
#[test]
fn tests_that_skip_are_listed_for_the_summary() {
    fn visit(dir: &Path, found: &mut Vec<String>) {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                if p.file_name().is_some_and(|n| n != "target") {
                    visit(&p, found);
                }
            } else if p.extension().is_some_and(|x| x == "rs") {
                let text = std::fs::read_to_string(&p).unwrap_or_default();
                let squeezed: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
                for bad in [
                    "eprintln!(\"skipp",
                    "eprintln!( \"skipp",
                    "println!(\"skipp",
                ] {
                    if squeezed.contains(bad) {
                        found.push(format!("{}: {bad}", p.display()));
                    }
                }
            }
        }
    }
    let mut found = Vec::new();
    visit(&root().join("crates"), &mut found);
    assert!(
        found.is_empty(),
        "say a skip with tether_testkit::skip! so the summary counts it: {found:#?}"
    );
    let script = std::fs::read_to_string(root().join("scripts/test")).unwrap();
    assert!(
        script.contains("TETHER_TEST_SKIPS"),
        "scripts/test lists skips"
    );
}
