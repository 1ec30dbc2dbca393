//! Tests of the `Architecture Invariant:` lines in `ARCHITECTURE.md` that a test can check,
//! by reading the workspace's own source files.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).expect("read source dir") {
        let p = e.expect("dir entry").path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// A file's code before its unit tests (by convention the last item, `#[cfg(test)]`).
fn code(path: &Path) -> String {
    let text = std::fs::read_to_string(path).expect("read source file");
    match text.find("#[cfg(test)]") {
        Some(i) => text[..i].to_string(),
        None => text,
    }
}

/// The exporter's top-level module of a file (`commands`, `sources`, `http`, …).
fn module_of(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).expect("under src");
    let first = rel.components().next().expect("a component");
    first
        .as_os_str()
        .to_string_lossy()
        .trim_end_matches(".rs")
        .to_string()
}

/// Top-level module → the top-level modules its code names through `crate::`.
fn exporter_imports() -> BTreeMap<String, BTreeSet<String>> {
    let src = workspace().join("exporter/src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in files {
        let m = module_of(&src, &f);
        let text = code(&f);
        let deps = graph.entry(m.clone()).or_default();
        for (i, _) in text.match_indices("crate::") {
            let name: String = text[i + 7..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() && name != m {
                deps.insert(name);
            }
        }
    }
    graph
}

/// Architecture Invariant: the exporter's modules import each other without cycles.
#[test]
fn no_import_cycles_between_exporter_modules() {
    let graph = exporter_imports();
    // Depth-first search for a back edge.
    fn visit(
        m: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) {
        if done.contains(m) {
            return;
        }
        assert!(
            !path.iter().any(|p| p == m),
            "import cycle: {} -> {m}",
            path.join(" -> ")
        );
        path.push(m.to_string());
        for d in graph.get(m).into_iter().flatten() {
            visit(d, graph, path, done);
        }
        path.pop();
        done.insert(m.to_string());
    }
    let mut done = BTreeSet::new();
    for m in graph.keys() {
        visit(m, &graph, &mut Vec::new(), &mut done);
    }
}

/// Architecture Invariant: only `cli` names `commands`; commands never name each other or
/// `cli`; infrastructure (sources, sinks, http, sampler, configuration) never names a
/// command.
#[test]
fn nothing_below_the_commands_imports_them() {
    let graph = exporter_imports();
    for (m, deps) in &graph {
        if m != "cli" && m != "lib" && m != "main" {
            assert!(!deps.contains("commands"), "{m} imports commands");
            assert!(!deps.contains("cli"), "{m} imports cli");
        }
    }
    let src = workspace().join("exporter/src/commands");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    for f in files {
        let text = code(&f);
        // `super::` inside a command's own submodule is that command; only
        // `crate::commands::` reaches another.
        assert!(
            !text.contains("crate::commands::"),
            "{} imports another command",
            f.display()
        );
    }
}

/// Architecture Invariant: `truthscale-core` performs no I/O and never reads the clock.
#[test]
fn core_has_no_io_and_no_clock() {
    let src = workspace().join("truthscale-core/src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    assert!(files.len() > 10, "found the core's files");
    for f in files {
        let text = code(&f);
        for banned in [
            "std::fs",
            "std::net",
            "std::env",
            "std::process",
            "std::thread",
            "std::io::stdin",
            "std::io::stdout",
            "SystemTime",
            "Instant",
            "File::open",
        ] {
            assert!(
                !text.contains(banned),
                "{} names {banned}: the core performs no I/O and reads no clock",
                f.display()
            );
        }
    }
}

/// Architecture Invariant: the only `unsafe` code is in `sources/nvml/raw.rs`.
#[test]
fn unsafe_only_in_the_raw_nvml_module() {
    for dir in ["exporter/src", "truthscale-core/src"] {
        let mut files = Vec::new();
        rust_files(&workspace().join(dir), &mut files);
        for f in files {
            if f.ends_with("sources/nvml/raw.rs") || f.ends_with("architecture.rs") {
                continue;
            }
            let text = std::fs::read_to_string(&f).expect("read");
            assert!(
                !text.contains("unsafe {") && !text.contains("unsafe fn"),
                "{} has unsafe code",
                f.display()
            );
        }
    }
}

/// Architecture Invariant: a scrape never samples: the HTTP layer names no source and no
/// sampler, only the snapshot; nor does it compress (the sampler gzips once per tick).
#[test]
fn http_never_samples() {
    let graph = exporter_imports();
    let http = &graph["http"];
    for forbidden in ["sources", "pipeline", "compose"] {
        assert!(!http.contains(forbidden), "http imports {forbidden}");
    }
    let dir = workspace().join("exporter/src/http");
    for entry in std::fs::read_dir(&dir).expect("exporter/src/http") {
        let path = entry.expect("a file of exporter/src/http").path();
        let text = code(&path);
        for forbidden in ["flate2", "GzEncoder", "::gzip("] {
            assert!(
                !text.contains(forbidden),
                "{} names {forbidden}: compression belongs to the sampler",
                path.display()
            );
        }
    }
}

/// Architecture Invariant: the pipeline never sees the configuration: it is handed a built
/// source and built stages by the composition root (`compose`), so it cannot ask which source
/// it runs.
#[test]
fn the_pipeline_is_handed_what_it_runs() {
    let graph = exporter_imports();
    let pipeline = &graph["pipeline"];
    for forbidden in ["config", "compose", "attribution", "enrichment", "commands"] {
        assert!(
            !pipeline.contains(forbidden),
            "pipeline imports {forbidden}: {pipeline:?}"
        );
    }
    let mut files = Vec::new();
    rust_files(&workspace().join("exporter/src/pipeline"), &mut files);
    for f in files {
        let text = code(&f);
        for forbidden in ["SourceConfig", "Settings", "source.kind()"] {
            assert!(
                !text.contains(forbidden),
                "{} names {forbidden}",
                f.display()
            );
        }
    }
}

/// Architecture Invariant: `sources/` holds only sources: every file directly in it but
/// `mod.rs`, and every folder's `mod.rs`, implements `Source`.
#[test]
fn sources_holds_only_sources() {
    let dir = workspace().join("exporter/src/sources");
    for entry in std::fs::read_dir(&dir).expect("exporter/src/sources") {
        let path = entry.expect("an entry of sources/").path();
        let file = if path.is_dir() {
            path.join("mod.rs")
        } else if path.file_name().is_some_and(|n| n == "mod.rs") {
            continue;
        } else {
            path.clone()
        };
        let text = std::fs::read_to_string(&file).expect("a source file");
        assert!(
            [
                "impl Source for",
                "impl super::Source for",
                "impl crate::sources::Source for"
            ]
            .iter()
            .any(|i| text.contains(i)),
            "{} is in sources/ but is no source",
            file.display()
        );
    }
}

/// Architecture Invariant: adding a source is its own file plus one line in the `sources!`
/// list in `sources/mod.rs`: nothing outside `sources/` matches on the configured source, and
/// inside it the variants are written out only by that list (and the default).
#[test]
fn only_sources_match_on_the_source_config() {
    let src = workspace().join("exporter/src");
    let module = code(&src.join("sources/mod.rs"));
    let list = module
        .split_once("\nsources! {\n")
        .and_then(|(_, rest)| rest.split_once("\n}\n"))
        .expect("the sources! list")
        .0;
    let variants: Vec<String> = list
        .lines()
        .filter_map(|l| {
            l.split_once("=> ")?
                .1
                .split_once('(')
                .map(|(v, _)| v.to_string())
        })
        .collect();
    assert_eq!(
        variants,
        ["Sim", "Replay", "Nvml", "Auto", "DcgmExporter", "Null"],
        "the sources! list"
    );
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    for f in files {
        let text = code(&f);
        for variant in &variants {
            let uses = text.matches(&format!("SourceConfig::{variant}(")).count();
            let allowed = usize::from(f == src.join("sources/mod.rs") && variant == "Sim");
            assert!(
                uses <= allowed,
                "{} writes out SourceConfig::{variant}",
                f.display()
            );
        }
    }
}
