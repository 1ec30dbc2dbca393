//! The two test tiers (`truthscale_e2e::external_tool`): every external program a test runs
//! is found through `require_tool_or_return!` (the guard a test of the external-tool tier
//! starts with) or `require_tool` (a helper's use, which fails a test without that guard), so
//! that `cargo test --workspace` with only a Rust toolchain runs the rest and says what it
//! did not run. This scans the sources for a way around them.

use std::path::{Path, PathBuf};

use truthscale_e2e::workspace;

/// What may start a program by a literal name: the helpers' own `kill` (procps), which sends
/// signals to the processes the tests started.
const ALLOWED_LITERAL_PROGRAMS: [&str; 1] = ["kill"];

/// The calls that find an external tool.
const HELPERS: [&str; 2] = ["require_tool_or_return!(", "require_tool("];

/// Each way `text` (the source of `file`) uses an external tool around the helpers, as
/// `file:line: code`.
fn bypasses(file: &Path, text: &str) -> Vec<String> {
    let usr_bin = concat!("\"/usr", "/bin/");
    let command_literal = concat!("Command::new", "(\"");
    let mut found = Vec::new();
    let mut previous = "";
    for (n, line) in text.lines().enumerate() {
        let code = line.trim();
        // The helper's own unit tests hold tool paths as data.
        if code == "#[cfg(test)]" && text.lines().nth(n + 1) == Some("mod tests {") {
            break;
        }
        if code.starts_with("//") {
            continue;
        }
        // A call that rustfmt split puts its first argument on the next line.
        let through_helper = HELPERS
            .iter()
            .any(|h| code.contains(h) || previous.trim_end().ends_with(h));
        let mut bad = code.contains(usr_bin) && !through_helper;
        if let Some(at) = code.find(command_literal) {
            let rest = &code[at + command_literal.len()..];
            let program = rest.split('"').next().unwrap_or_default();
            bad |= !ALLOWED_LITERAL_PROGRAMS.contains(&program);
        }
        if bad {
            found.push(format!("{}:{}: {code}", file.display(), n + 1));
        }
        previous = code;
    }
    found
}

/// The e2e modules (this one aside) and the helpers.
fn sources() -> Vec<PathBuf> {
    let dir = workspace().join("tests/tests/it");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "rs"))
        .filter(|p| p.file_name().is_some_and(|n| n != "tiers.rs"))
        .collect();
    files.sort();
    files.push(workspace().join("tests/src/lib.rs"));
    files
}

#[test]
fn every_external_tool_is_found_through_the_tier_helpers() {
    let files = sources();
    assert!(files.len() > 15, "{files:?}");
    let mut found = Vec::new();
    let mut guards = 0;
    for file in &files {
        let text =
            std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        if file.starts_with(workspace().join("tests/tests")) {
            guards += text.matches(HELPERS[0]).count();
        }
        found.extend(bypasses(file, &text));
    }
    assert!(
        found.is_empty(),
        "external tools used around `require_tool_or_return!` / `require_tool` \
         (tests/src/lib.rs): {found:#?}"
    );
    // The external-tool tier is there to be guarded.
    assert!(guards >= 17, "{guards} guards");
}

/// The scan itself: what it flags and what it lets through.
#[test]
fn the_scan_flags_a_tool_used_around_the_helpers() {
    let file = Path::new("x.rs");
    let flagged = |code: &str| !bypasses(file, code).is_empty();
    let usr_bin = concat!("/usr", "/bin/");
    assert!(flagged(&format!(
        "let p = Path::new(\"{usr_bin}promtool\");"
    )));
    assert!(flagged(&format!(
        "let c = {}(\"python3\");",
        concat!("Command::", "new")
    )));
    assert!(flagged(&format!(
        "std::process::{}(\"{usr_bin}tmux\")",
        concat!("Command::", "new")
    )));
    assert!(!flagged(&format!(
        "let p = require_tool_or_return!(\"{usr_bin}promtool\", \"prometheus\");"
    )));
    assert!(!flagged(&format!(
        "let p = require_tool_or_return!(\n    \"{usr_bin}promtool\",\n    \"prometheus\",\n);"
    )));
    assert!(!flagged(&format!(
        "let c = require_tool(\"{usr_bin}chromium\", \"chromium\");"
    )));
    assert!(!flagged(&format!("/// Runs `{usr_bin}prometheus`.")));
    assert!(!flagged(&format!(
        "let k = {}(\"kill\");",
        concat!("Command::", "new")
    )));
    assert!(!flagged(&format!(
        "let c = {}(&promtool);",
        concat!("Command::", "new")
    )));
}
