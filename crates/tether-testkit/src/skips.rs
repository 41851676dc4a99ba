//! Tests that cannot run here (not root, a tool missing) pass after saying why; they are
//! also listed, so the suite's summary counts them apart from the tests that ran
//! (`scripts/test`).

use std::io::Write;

/// The variable naming the file each skipped test adds its line to (`scripts/test` sets it).
pub const SKIPS_ENV: &str = "TETHER_TEST_SKIPS";

/// Says why the calling test skips (on stderr, captured with the test's output) and, if
/// [`SKIPS_ENV`] names a file, adds `TEST: WHY` to it (the test is named after its thread,
/// as the test harness names them).
pub fn note_skip(why: &str) {
    eprintln!("{why}");
    if let Some(path) = std::env::var_os(SKIPS_ENV) {
        list(std::path::Path::new(&path), why);
    }
}

/// Adds `TEST: WHY` to the file at `path`.
fn list(path: &std::path::Path, why: &str) {
    let test = std::thread::current()
        .name()
        .unwrap_or("(unnamed thread)")
        .to_string();
    let line = format!("{test}: {}\n", why.replace('\n', " "));
    // One write with O_APPEND: lines of tests running at once do not mix.
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        let _ = f.write_all(line.as_bytes());
    }
}

/// [`note_skip`] with `format!`'s arguments: `skip!("skipped: {why}")`.
#[macro_export]
macro_rules! skip {
    ($($arg:tt)*) => {
        $crate::note_skip(&format!($($arg)*))
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_skip_is_listed_under_the_test_s_name() {
        let dir = std::env::temp_dir().join(format!("tether-skips-{}", std::process::id()));
        let _ = std::fs::remove_file(&dir);
        list(&dir, &format!("skipped: {} is missing", "a tool"));
        let text = std::fs::read_to_string(&dir).unwrap();
        let _ = std::fs::remove_file(&dir);
        assert_eq!(
            text,
            "skips::tests::a_skip_is_listed_under_the_test_s_name: \
             skipped: a tool is missing\n"
        );
    }
}
