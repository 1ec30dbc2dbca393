//! `docs/metrics.md` must match the metric catalog. `UPDATE_DOCS=1` rewrites it.

use truthscale_core::catalog;

const BEGIN: &str = "<!-- catalog:begin -->\n";
const END: &str = "<!-- catalog:end -->";

#[test]
#[expect(
    clippy::disallowed_methods,
    reason = "a test of the docs: reads docs/metrics.md, and writes it under UPDATE_DOCS"
)]
fn metrics_doc_matches_catalog() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/metrics.md");
    let doc = std::fs::read_to_string(path).expect("docs/metrics.md exists");
    let (head, rest) = doc
        .split_once(BEGIN)
        .expect("docs/metrics.md has the begin marker");
    let (_, tail) = rest
        .split_once(END)
        .expect("docs/metrics.md has the end marker");
    let expected = format!("{head}{BEGIN}{}{END}{tail}", catalog::markdown_table());
    if std::env::var_os("UPDATE_DOCS").is_some() {
        std::fs::write(path, &expected).unwrap();
        return;
    }
    assert!(
        doc == expected,
        "docs/metrics.md is out of date with truthscale_core::catalog; run `UPDATE_DOCS=1 cargo test -p truthscale-core --test it docs::`"
    );
}
