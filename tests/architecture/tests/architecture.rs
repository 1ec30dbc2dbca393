//! Tests of the `Architecture Invariant:` lines in `ARCHITECTURE.md` that a test can check,
//! on the workspace's own source parsed with `syn`.
//!
//! Every `use` tree (groups, `super::`, `self::`, renames, globs) and every path in an
//! expression, a type, a pattern or a macro's arguments is resolved to a path from its
//! crate's root (`crate::commands::top::…`) or from an external crate's name (`std::fs`). A
//! file's module path comes from where it lies (`exporter/src/commands/top.rs` is
//! `crate::commands::top`), so the rules follow files that move. Items under `#[cfg(test)]`
//! or `#[test]` are left out by their attributes, and so are files of modules declared only
//! for tests.
//!
//! Each rule is a function over (path, source text): the tests run it on the real tree, and
//! on synthetic files that break it (the `caught_*` tests at the end).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};

use syn::buffer::{Cursor, TokenBuffer};
use syn::punctuated::Punctuated;
use syn::visit::{self, Visit};
use syn::{Attribute, Expr, ImplItem, Item, Meta, Token, UseTree};

/// A path, segment by segment: `["crate", "commands", "top"]`, `["std", "fs"]`.
type Segs = Vec<String>;

/// The direct dependencies `truthscale-core` may have (its `[dependencies]`).
const CORE_DEPENDENCIES: &[&str] = &[
    "opentelemetry-semantic-conventions",
    "rand",
    "rand_chacha",
    "rand_distr",
    "serde",
    "serde_json",
    "thiserror",
    "time",
];

/// Paths the core never names outside its tests: I/O, the environment, processes, threads
/// and the clock.
const CORE_BANNED: &[&[&str]] = &[
    &["std", "fs"],
    &["std", "net"],
    &["std", "env"],
    &["std", "process"],
    &["std", "thread"],
    &["std", "time", "SystemTime"],
    &["std", "time", "Instant"],
    &["std", "io", "stdin"],
    &["std", "io", "stdout"],
    &["std", "io", "stderr"],
    &["time", "OffsetDateTime", "now_utc"],
    &["time", "OffsetDateTime", "now_local"],
    &["time", "UtcDateTime", "now"],
    &["time", "Timestamp", "now"],
    &["time", "Instant"],
];

/// Macros that write to the terminal: I/O, which the core does not do.
const CORE_BANNED_MACROS: &[&str] = &["print", "println", "eprint", "eprintln", "dbg"];

// ---------------------------------------------------------------------------------------
// The tree

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("tests/architecture lies in the workspace")
        .to_path_buf()
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(workspace().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
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

/// The `.rs` files under `src` (`exporter/src`), as (path from the workspace, text), less
/// the files of modules declared only for tests (`#[cfg(test)] mod architecture;`).
fn crate_files(src: &str) -> Vec<(String, String)> {
    let mut paths = Vec::new();
    rust_files(&workspace().join(src), &mut paths);
    paths.sort();
    let files: Vec<(String, String)> = paths
        .iter()
        .map(|p| {
            let rel = p
                .strip_prefix(workspace())
                .expect("under the workspace")
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join("/");
            (rel, std::fs::read_to_string(p).expect("read a source file"))
        })
        .collect();
    assert!(files.len() > 5, "found the files of {src}");
    let test_only: Vec<Segs> = files.iter().flat_map(|(p, t)| test_modules(p, t)).collect();
    files
        .into_iter()
        .filter(|(p, _)| {
            let m = place(p).module;
            !test_only.iter().any(|t| m.starts_with(t))
        })
        .collect()
}

/// Where a file sits: its crate's name and its module path inside the crate.
struct Place {
    krate: String,
    module: Segs,
}

/// `exporter/src/commands/top.rs` → `truthscale_exporter`, `[commands, top]`; `mod.rs` is its
/// directory, `lib.rs` and `main.rs` the root.
fn place(path: &str) -> Place {
    let (dir, rest) = path
        .split_once("/src/")
        .unwrap_or_else(|| panic!("{path}: not under a crate's src/"));
    let rest = rest
        .strip_suffix(".rs")
        .unwrap_or_else(|| panic!("{path}: not a .rs file"));
    let mut module: Segs = rest.split('/').map(String::from).collect();
    if module.last().is_some_and(|m| m == "mod") || module == ["lib"] || module == ["main"] {
        module.pop();
    }
    Place {
        krate: crate_name(dir),
        module,
    }
}

/// The library name of the crate in `dir`, from its manifest.
fn crate_name(dir: &str) -> String {
    std::fs::read_to_string(workspace().join(dir).join("Cargo.toml"))
        .ok()
        .and_then(|t| toml::from_str::<toml::Table>(&t).ok())
        .and_then(|t| Some(t.get("package")?.get("name")?.as_str()?.to_string()))
        .unwrap_or_else(|| dir.to_string())
        .replace('-', "_")
}

/// The top-level module of a file (`commands`, `sources`, `http`, …; `crate` for the roots).
fn top_module(path: &str) -> String {
    place(path)
        .module
        .first()
        .cloned()
        .unwrap_or_else(|| "crate".into())
}

fn parse(path: &str, text: &str) -> syn::File {
    syn::parse_file(text).unwrap_or_else(|e| panic!("{path}: does not parse: {e}"))
}

// ---------------------------------------------------------------------------------------
// Test code, by attribute

/// `#[test]`, `#[cfg(test)]`, `#[cfg(all(test, …))]`.
fn is_test(attrs: &[Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("test")
            || (a.path().is_ident("cfg")
                && a.parse_args::<Meta>()
                    .is_ok_and(|m| holds_only_under(&m, &|_| false)))
    })
}

/// Whether `attrs` gate an item to tests or to the `testing` and `fuzzing` features: a hook,
/// not the embedding API.
fn is_hook(attrs: &[Attribute]) -> bool {
    let hook_feature = |f: &str| f == "testing" || f == "fuzzing";
    is_test(attrs)
        || attrs.iter().any(|a| {
            a.path().is_ident("cfg")
                && a.parse_args::<Meta>()
                    .is_ok_and(|m| holds_only_under(&m, &hook_feature))
        })
}

/// Whether a `cfg` predicate holds only under `test` or a `feature = "…"` that `feature`
/// accepts.
fn holds_only_under(m: &Meta, feature: &dyn Fn(&str) -> bool) -> bool {
    match m {
        Meta::Path(p) => p.is_ident("test"),
        Meta::NameValue(nv) => {
            nv.path.is_ident("feature")
                && matches!(&nv.value, syn::Expr::Lit(syn::ExprLit { lit: syn::Lit::Str(s), .. })
                    if feature(&s.value()))
        }
        Meta::List(l) => {
            let Ok(args) = l.parse_args_with(Punctuated::<Meta, Token![,]>::parse_terminated)
            else {
                return false;
            };
            let only = |m: &Meta| holds_only_under(m, feature);
            if l.path.is_ident("all") {
                args.iter().any(only)
            } else if l.path.is_ident("any") {
                !args.is_empty() && args.iter().all(only)
            } else {
                false
            }
        }
    }
}

fn item_attrs(item: &Item) -> &[Attribute] {
    match item {
        Item::Const(i) => &i.attrs,
        Item::Enum(i) => &i.attrs,
        Item::ExternCrate(i) => &i.attrs,
        Item::Fn(i) => &i.attrs,
        Item::ForeignMod(i) => &i.attrs,
        Item::Impl(i) => &i.attrs,
        Item::Macro(i) => &i.attrs,
        Item::Mod(i) => &i.attrs,
        Item::Static(i) => &i.attrs,
        Item::Struct(i) => &i.attrs,
        Item::Trait(i) => &i.attrs,
        Item::TraitAlias(i) => &i.attrs,
        Item::Type(i) => &i.attrs,
        Item::Union(i) => &i.attrs,
        Item::Use(i) => &i.attrs,
        _ => &[],
    }
}

fn impl_item_attrs(item: &ImplItem) -> &[Attribute] {
    match item {
        ImplItem::Const(i) => &i.attrs,
        ImplItem::Fn(i) => &i.attrs,
        ImplItem::Type(i) => &i.attrs,
        ImplItem::Macro(i) => &i.attrs,
        _ => &[],
    }
}

/// A visitor's `visit_item` and `visit_impl_item` that leave out test items (`#[test]`,
/// `#[cfg(test)]`), for the rules that look at production code only.
macro_rules! skip_test_items {
    () => {
        fn visit_item(&mut self, item: &'ast Item) {
            if !is_test(item_attrs(item)) {
                visit::visit_item(self, item);
            }
        }
        fn visit_impl_item(&mut self, item: &'ast ImplItem) {
            if !is_test(impl_item_attrs(item)) {
                visit::visit_impl_item(self, item);
            }
        }
    };
}

/// The modules a file declares only for tests (`#[cfg(test)] mod x;`), from the crate root.
fn test_modules(path: &str, text: &str) -> Vec<Segs> {
    fn walk(items: &[Item], module: &mut Segs, out: &mut Vec<Segs>) {
        for item in items {
            if let Item::Mod(m) = item {
                module.push(m.ident.to_string());
                if is_test(&m.attrs) {
                    out.push(module.clone());
                } else if let Some((_, items)) = &m.content {
                    walk(items, module, out);
                }
                module.pop();
            }
        }
    }
    let file = parse(path, text);
    let mut module = place(path).module;
    let mut out = Vec::new();
    if is_test(&file.attrs) {
        out.push(module);
    } else {
        walk(&file.items, &mut module, &mut out);
    }
    out
}

// ---------------------------------------------------------------------------------------
// Names

/// One imported name of a `use` tree: its path as written, and the name it binds.
struct Leaf {
    raw: Segs,
    leading_colon: bool,
    binds: Option<String>,
}

/// Every leaf of a `use` tree: `use a::{b as c, d::*, self}` is `a::b` (as `c`), `a::d::*`
/// and `a` (as `a`).
fn leaves(tree: &UseTree, prefix: &mut Segs, leading_colon: bool, out: &mut Vec<Leaf>) {
    let mut leaf = |raw: Segs, binds: Option<String>| {
        out.push(Leaf {
            raw,
            leading_colon,
            binds: binds.filter(|b| b != "_"),
        });
    };
    match tree {
        UseTree::Path(p) => {
            prefix.push(p.ident.to_string());
            leaves(&p.tree, prefix, leading_colon, out);
            prefix.pop();
        }
        UseTree::Name(n) if n.ident == "self" => leaf(prefix.clone(), prefix.last().cloned()),
        UseTree::Name(n) => {
            let mut raw = prefix.clone();
            raw.push(n.ident.to_string());
            leaf(raw, Some(n.ident.to_string()));
        }
        UseTree::Rename(r) => {
            let mut raw = prefix.clone();
            if r.ident != "self" {
                raw.push(r.ident.to_string());
            }
            leaf(raw, Some(r.rename.to_string()));
        }
        UseTree::Glob(_) => {
            let mut raw = prefix.clone();
            raw.push("*".into());
            leaf(raw, None);
        }
        UseTree::Group(g) => {
            for t in &g.items {
                leaves(t, prefix, leading_colon, out);
            }
        }
    }
}

/// What a file declares, module by module: the names its `use` items bind (a name may be
/// bound differently in different blocks: each is kept) and its child modules.
#[derive(Default)]
struct Declared {
    krate: String,
    binds: HashMap<(Segs, String), Vec<(Segs, bool)>>,
    children: HashSet<(Segs, String)>,
}

impl Declared {
    /// What `raw` (written in `module`) names: `crate::…` for this crate, else a path from
    /// an external crate's name; a first segment that is neither a binding nor a child
    /// module is left as written.
    fn resolve(&self, module: &Segs, raw: &[String], leading_colon: bool, depth: u8) -> Vec<Segs> {
        let Some(first) = raw.first() else {
            return Vec::new();
        };
        if leading_colon {
            return vec![raw.to_vec()];
        }
        let rooted = |base: &[String], rest: &[String]| -> Segs {
            std::iter::once("crate".to_string())
                .chain(base.iter().cloned())
                .chain(rest.iter().cloned())
                .collect()
        };
        if first == "crate" || *first == self.krate {
            return vec![rooted(&[], &raw[1..])];
        }
        if first == "self" || first == "super" {
            let mut base = module.clone();
            let mut i = usize::from(first == "self");
            while raw.get(i).is_some_and(|s| s == "super") {
                base.pop();
                i += 1;
            }
            return vec![rooted(&base, &raw[i..])];
        }
        if depth < 8
            && let Some(targets) = self.binds.get(&(module.clone(), first.clone()))
        {
            let mut out = Vec::new();
            for (target, leading) in targets {
                if !leading && target.len() == 1 && target[0] == *first {
                    continue; // `use serde;`: the crate itself
                }
                for mut r in self.resolve(module, target, *leading, depth + 1) {
                    r.extend(raw[1..].iter().cloned());
                    out.push(r);
                }
            }
            if !out.is_empty() {
                return out;
            }
        }
        if self.children.contains(&(module.clone(), first.clone())) {
            return vec![rooted(module, raw)];
        }
        vec![raw.to_vec()]
    }
}

/// Pass one: the bindings and child modules, in the file's non-test code.
struct Declarations {
    module: Segs,
    out: Declared,
}

impl<'ast> Visit<'ast> for Declarations {
    fn visit_item(&mut self, item: &'ast Item) {
        if is_test(item_attrs(item)) {
            return;
        }
        match item {
            Item::Mod(m) => {
                self.out
                    .children
                    .insert((self.module.clone(), m.ident.to_string()));
                if let Some((_, items)) = &m.content {
                    self.module.push(m.ident.to_string());
                    for i in items {
                        self.visit_item(i);
                    }
                    self.module.pop();
                }
            }
            Item::Use(u) => {
                let mut out = Vec::new();
                leaves(
                    &u.tree,
                    &mut Vec::new(),
                    u.leading_colon.is_some(),
                    &mut out,
                );
                for l in out {
                    if let Some(b) = l.binds {
                        self.out
                            .binds
                            .entry((self.module.clone(), b))
                            .or_default()
                            .push((l.raw, l.leading_colon));
                    }
                }
            }
            _ => visit::visit_item(self, item),
        }
    }

    fn visit_impl_item(&mut self, item: &'ast ImplItem) {
        if !is_test(impl_item_attrs(item)) {
            visit::visit_impl_item(self, item);
        }
    }
}

/// A path a file's code names, resolved.
struct Named {
    path: Segs,
    /// Whether it lies in `impl Default for SourceConfig`.
    in_source_config_default: bool,
}

/// What a file's non-test code names and does.
#[derive(Default)]
struct Facts {
    names: Vec<Named>,
    /// Where it asks a source which it is: `.kind()` of a source, or a source's kind or name
    /// compared to a string.
    source_queries: Vec<String>,
    /// The macros it invokes (last segment of the path).
    macros: Vec<String>,
}

/// Pass two: every path, resolved.
struct Names<'a> {
    declared: &'a Declared,
    module: Segs,
    self_types: Vec<Option<Segs>>,
    source_config_default: u32,
    facts: Facts,
}

impl Names<'_> {
    fn name(&mut self, raw: Segs, leading_colon: bool) {
        let raw = match (raw.first(), self.self_types.last()) {
            (Some(s), Some(Some(t))) if s == "Self" => {
                t.iter().chain(raw[1..].iter()).cloned().collect()
            }
            _ => raw,
        };
        for path in self.declared.resolve(&self.module, &raw, leading_colon, 0) {
            self.facts.names.push(Named {
                path,
                in_source_config_default: self.source_config_default > 0,
            });
        }
    }

    /// Paths (`a::b`, `::a`) and `….source.kind()` in tokens that are not expressions
    /// (`matches!(x, P)`, `tracing::info!(k = %v)`, `vec![x; n]`, `macro_rules!` bodies).
    fn scan(&mut self, mut c: Cursor<'_>) {
        fn colons(c: Cursor<'_>) -> Option<Cursor<'_>> {
            let (a, c) = c.punct()?;
            let (b, c) = c.punct()?;
            (a.as_char() == ':' && b.as_char() == ':').then_some(c)
        }
        while !c.eof() {
            if let Some((inside, _, _, next)) = c.any_group() {
                self.scan(inside);
                c = next;
                continue;
            }
            let (leading_colon, mut p) = match colons(c) {
                Some(after) => (true, after),
                None => (false, c),
            };
            let mut raw = Vec::new();
            while let Some((ident, after)) = p.ident() {
                raw.push(ident.to_string());
                p = after;
                match colons(after) {
                    Some(next) if next.ident().is_some() => p = next,
                    _ => break,
                }
            }
            if raw.is_empty() {
                c = c.token_tree().map_or(p, |(_, next)| next);
                continue;
            }
            if raw.len() > 1 || leading_colon {
                self.name(raw.clone(), leading_colon);
            }
            if raw.len() == 1
                && raw[0].ends_with("source")
                && let Some((dot, after)) = p.punct()
                && dot.as_char() == '.'
                && let Some((method, after)) = after.ident()
                && method == "kind"
                && let Some((args, _, _, _)) = after.any_group()
                && args.eof()
            {
                self.facts
                    .source_queries
                    .push(format!("`{}.kind()` in a macro's arguments", raw[0]));
            }
            c = p;
        }
    }
}

/// The last name of an expression: `settings.source` → `source`, `self.source()` → `source`.
fn tail(e: &Expr) -> Option<String> {
    match e {
        Expr::Field(f) => match &f.member {
            syn::Member::Named(i) => Some(i.to_string()),
            syn::Member::Unnamed(_) => None,
        },
        Expr::Path(p) => p.path.segments.last().map(|s| s.ident.to_string()),
        Expr::MethodCall(m) => Some(m.method.to_string()),
        Expr::Reference(r) => tail(&r.expr),
        Expr::Paren(p) => tail(&p.expr),
        Expr::Unary(u) => tail(&u.expr),
        _ => None,
    }
}

fn names_a_source(e: &Expr) -> bool {
    tail(e).is_some_and(|t| t.ends_with("source"))
}

/// `….source.kind()` or `….source.name()`.
fn source_label(e: &Expr) -> bool {
    match e {
        Expr::MethodCall(m) => {
            (m.method == "kind" || m.method == "name")
                && m.args.is_empty()
                && names_a_source(&m.receiver)
        }
        Expr::Reference(r) => source_label(&r.expr),
        Expr::Paren(p) => source_label(&p.expr),
        _ => false,
    }
}

fn is_str(e: &Expr) -> bool {
    match e {
        Expr::Lit(l) => matches!(l.lit, syn::Lit::Str(_)),
        Expr::Reference(r) => is_str(&r.expr),
        _ => false,
    }
}

fn pat_has_str(p: &syn::Pat) -> bool {
    match p {
        syn::Pat::Lit(l) => matches!(l.lit, syn::Lit::Str(_)),
        syn::Pat::Or(o) => o.cases.iter().any(pat_has_str),
        _ => false,
    }
}

impl<'ast> Visit<'ast> for Names<'_> {
    fn visit_item(&mut self, item: &'ast Item) {
        if is_test(item_attrs(item)) {
            return;
        }
        match item {
            Item::Mod(m) => {
                if let Some((_, items)) = &m.content {
                    self.module.push(m.ident.to_string());
                    for i in items {
                        self.visit_item(i);
                    }
                    self.module.pop();
                }
            }
            Item::Use(u) => {
                let mut out = Vec::new();
                leaves(
                    &u.tree,
                    &mut Vec::new(),
                    u.leading_colon.is_some(),
                    &mut out,
                );
                for l in out {
                    self.name(l.raw, l.leading_colon);
                }
            }
            Item::Impl(i) => {
                let self_ty = match &*i.self_ty {
                    syn::Type::Path(p) if p.qself.is_none() => {
                        let raw: Segs = p
                            .path
                            .segments
                            .iter()
                            .map(|s| s.ident.to_string())
                            .collect();
                        let leading = p.path.leading_colon.is_some();
                        self.declared
                            .resolve(&self.module, &raw, leading, 0)
                            .into_iter()
                            .next()
                    }
                    _ => None,
                };
                let default_of_source_config =
                    i.trait_.as_ref().is_some_and(|(t, _)| {
                        t.segments.last().is_some_and(|s| s.ident == "Default")
                    }) && self_ty
                        .as_ref()
                        .is_some_and(|t| t.last().is_some_and(|s| s == "SourceConfig"));
                self.self_types.push(self_ty);
                self.source_config_default += u32::from(default_of_source_config);
                visit::visit_item_impl(self, i);
                self.source_config_default -= u32::from(default_of_source_config);
                self.self_types.pop();
            }
            _ => visit::visit_item(self, item),
        }
    }

    fn visit_impl_item(&mut self, item: &'ast ImplItem) {
        if !is_test(impl_item_attrs(item)) {
            visit::visit_impl_item(self, item);
        }
    }

    fn visit_path(&mut self, p: &'ast syn::Path) {
        let raw = p.segments.iter().map(|s| s.ident.to_string()).collect();
        self.name(raw, p.leading_colon.is_some());
        visit::visit_path(self, p);
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        if let Some(last) = mac.path.segments.last() {
            self.facts.macros.push(last.ident.to_string());
        }
        self.visit_path(&mac.path);
        match mac.parse_body_with(Punctuated::<Expr, Token![,]>::parse_terminated) {
            Ok(args) => {
                for a in &args {
                    self.visit_expr(a);
                }
            }
            Err(_) => {
                let tokens = TokenBuffer::new2(mac.tokens.clone());
                self.scan(tokens.begin());
            }
        }
    }

    fn visit_expr_method_call(&mut self, m: &'ast syn::ExprMethodCall) {
        if m.method == "kind" && m.args.is_empty() && names_a_source(&m.receiver) {
            let of = tail(&m.receiver).unwrap_or_default();
            self.facts
                .source_queries
                .push(format!("`….{of}.kind()` asks a source which it is"));
        }
        visit::visit_expr_method_call(self, m);
    }

    fn visit_expr_binary(&mut self, b: &'ast syn::ExprBinary) {
        if matches!(b.op, syn::BinOp::Eq(_) | syn::BinOp::Ne(_))
            && ((source_label(&b.left) && is_str(&b.right))
                || (source_label(&b.right) && is_str(&b.left)))
        {
            self.facts
                .source_queries
                .push("compares a source's kind or name to a string".into());
        }
        visit::visit_expr_binary(self, b);
    }

    fn visit_expr_match(&mut self, m: &'ast syn::ExprMatch) {
        if source_label(&m.expr) && m.arms.iter().any(|a| pat_has_str(&a.pat)) {
            self.facts
                .source_queries
                .push("matches a source's kind or name against strings".into());
        }
        visit::visit_expr_match(self, m);
    }
}

/// What the non-test code of the file at `path` (from the workspace root) names.
fn facts(path: &str, text: &str) -> Facts {
    let place = place(path);
    let file = parse(path, text);
    if is_test(&file.attrs) {
        return Facts::default();
    }
    let mut declarations = Declarations {
        module: place.module.clone(),
        out: Declared {
            krate: place.krate,
            ..Declared::default()
        },
    };
    declarations.visit_file(&file);
    let mut names = Names {
        declared: &declarations.out,
        module: place.module,
        self_types: Vec::new(),
        source_config_default: 0,
        facts: Facts::default(),
    };
    names.visit_file(&file);
    names.facts
}

// ---------------------------------------------------------------------------------------
// The rules, over (path, text)

/// Top-level module → the top-level modules of the same crate its files name.
fn import_graph(files: &[(String, String)]) -> BTreeMap<String, BTreeSet<String>> {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (path, text) in files {
        let from = top_module(path);
        let names = facts(path, text).names;
        let deps = graph.entry(from.clone()).or_default();
        for n in names {
            if let [root, to, ..] = n.path.as_slice()
                && root == "crate"
                && *to != from
                && to != "*"
            {
                deps.insert(to.clone());
            }
        }
    }
    graph
}

/// A cycle in the graph, as the modules along it, if there is one.
fn find_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        m: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|p| p == m) {
            let mut cycle = path[i..].to_vec();
            cycle.push(m.to_string());
            return Some(cycle);
        }
        if done.contains(m) {
            return None;
        }
        path.push(m.to_string());
        for d in graph.get(m).into_iter().flatten() {
            if let Some(c) = visit(d, graph, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(m.to_string());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|m| visit(m, graph, &mut Vec::new(), &mut done))
}

fn graph_text(graph: &BTreeMap<String, BTreeSet<String>>) -> String {
    graph
        .iter()
        .map(|(m, deps)| {
            let deps: Vec<&str> = deps.iter().map(String::as_str).collect();
            format!("  {m} -> {}", deps.join(", "))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Only `cli` (and the crate roots) name `commands`; a command names no other command and
/// not `cli`; nothing else names either. `commands/mod.rs` holds only the commands, so any
/// path into `commands` but a command's own reaches another command.
fn command_violations(path: &str, text: &str) -> Vec<String> {
    let module = place(path).module;
    let top = module.first().map_or("crate", String::as_str);
    let own = module.get(1).filter(|_| top == "commands");
    let mut out = Vec::new();
    for n in facts(path, text).names {
        let [root, to, rest @ ..] = n.path.as_slice() else {
            continue;
        };
        if root != "crate" {
            continue;
        }
        let written = n.path.join("::");
        match top {
            "crate" | "cli" => {}
            "commands" => {
                if to == "cli" {
                    out.push(format!("{path}: a command names {written}"));
                }
                if to == "commands"
                    && let Some(cmd) = rest.first()
                    && Some(cmd) != own
                {
                    out.push(format!("{path}: a command names another: {written}"));
                }
            }
            _ => {
                if to == "commands" || to == "cli" {
                    out.push(format!(
                        "{path}: `{top}` names {written}; only cli names the commands"
                    ));
                }
            }
        }
    }
    out
}

/// Outside `sources/`, no path names a `SourceConfig` variant (through any alias, or a glob
/// of them) and nothing asks a source which it is; inside, the variants are written out only
/// by the `sources!` list and `impl Default for SourceConfig` in `sources/mod.rs`.
fn source_config_violations(path: &str, text: &str, variants: &[String]) -> Vec<String> {
    let module = place(path).module;
    let in_sources = module.first().is_some_and(|m| m == "sources");
    let the_list = module == ["sources"];
    let facts = facts(path, text);
    let mut out = Vec::new();
    for n in &facts.names {
        if let [.., ty, last] = n.path.as_slice()
            && ty == "SourceConfig"
            && (last == "*" || variants.contains(last))
            && !(the_list && n.in_source_config_default)
        {
            out.push(format!(
                "{path}: names the source variant {}: only the sources! list in sources/mod.rs \
                 (and its Default) writes one out; dispatch through SourceConfig's methods",
                n.path.join("::")
            ));
        }
    }
    if !in_sources {
        for q in facts.source_queries {
            out.push(format!(
                "{path}: {q}; only sources/ knows which source runs"
            ));
        }
    }
    out
}

/// The core's non-test code names no I/O, environment, process, thread or clock path (a
/// glob that could bring one in counts) and invokes no printing macro.
fn core_io_violations(path: &str, text: &str) -> Vec<String> {
    let facts = facts(path, text);
    let mut out = Vec::new();
    for n in &facts.names {
        let p = &n.path;
        let banned = CORE_BANNED.iter().any(|b| {
            let under = p.len() >= b.len() && p.iter().zip(b.iter()).all(|(x, y)| x == y);
            // `use std::*`, `use std::io::*`: a glob that could bring one in.
            let glob = p.last().is_some_and(|l| l == "*")
                && p.len() - 1 < b.len()
                && p.iter()
                    .zip(b.iter())
                    .take(p.len() - 1)
                    .all(|(x, y)| x == y);
            under || glob
        });
        if banned {
            out.push(format!(
                "{path}: names {}: the core performs no I/O and reads no clock",
                p.join("::")
            ));
        }
    }
    for m in &facts.macros {
        if CORE_BANNED_MACROS.contains(&m.as_str()) {
            out.push(format!("{path}: invokes {m}!: the core performs no I/O"));
        }
    }
    out
}

/// `http` names neither the sources nor the sampler, and compresses nothing.
fn http_violations(path: &str, text: &str) -> Vec<String> {
    if top_module(path) != "http" {
        return Vec::new();
    }
    let mut out = Vec::new();
    for n in facts(path, text).names {
        let p = &n.path;
        let written = p.join("::");
        if let [root, to, ..] = p.as_slice()
            && root == "crate"
            && (to == "sources" || to == "pipeline" || to == "compose")
        {
            out.push(format!(
                "{path}: names {written}: a scrape reads the snapshot, never a source or the sampler"
            ));
        }
        if p.first().is_some_and(|s| s == "flate2")
            || p.iter().any(|s| s == "GzEncoder")
            || (p.len() > 1 && p.last().is_some_and(|s| s == "gzip"))
        {
            out.push(format!(
                "{path}: names {written}: compression belongs to the sampler"
            ));
        }
    }
    out
}

/// The one place that reads the process environment.
const ENVIRONMENT_READER: &str = "exporter/src/config.rs";

/// Outside `config.rs`, the exporter never reads the process environment (`std::env::var`,
/// `vars_os`, …): every command is handed what `config::environment` read once.
fn environment_violations(path: &str, text: &str) -> Vec<String> {
    if path == ENVIRONMENT_READER {
        return Vec::new();
    }
    let mut out = Vec::new();
    for n in facts(path, text).names {
        let p = &n.path;
        let reads = matches!(p.as_slice(), [std, env, ..] if std == "std" && env == "env")
            && p.last().is_none_or(|l| l != "args");
        if reads {
            out.push(format!(
                "{path}: names {}: the environment is read once, by config::environment, and handed on",
                p.join("::")
            ));
        }
    }
    out
}

/// `unsafe` blocks, functions, impls, traits and extern blocks, tests included.
fn unsafe_code(path: &str, text: &str) -> Vec<String> {
    struct Unsafe(Vec<&'static str>);
    impl<'ast> Visit<'ast> for Unsafe {
        fn visit_expr_unsafe(&mut self, e: &'ast syn::ExprUnsafe) {
            self.0.push("an unsafe block");
            visit::visit_expr_unsafe(self, e);
        }
        fn visit_signature(&mut self, s: &'ast syn::Signature) {
            if matches!(s.safety, syn::Safety::Unsafe(_)) {
                self.0.push("an unsafe fn");
            }
            visit::visit_signature(self, s);
        }
        fn visit_item_impl(&mut self, i: &'ast syn::ItemImpl) {
            if i.unsafety.is_some() {
                self.0.push("an unsafe impl");
            }
            visit::visit_item_impl(self, i);
        }
        fn visit_item_trait(&mut self, i: &'ast syn::ItemTrait) {
            if i.unsafety.is_some() {
                self.0.push("an unsafe trait");
            }
            visit::visit_item_trait(self, i);
        }
        fn visit_item_foreign_mod(&mut self, i: &'ast syn::ItemForeignMod) {
            self.0.push("an extern block");
            visit::visit_item_foreign_mod(self, i);
        }
    }
    let mut v = Unsafe(Vec::new());
    v.visit_file(&parse(path, text));
    v.0.into_iter().map(|w| format!("{path}: {w}")).collect()
}

/// One line of the `sources!` list: `"kind" => Variant(module::Settings),`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ListedSource {
    kind: String,
    variant: String,
    settings: Segs,
}

/// The `sources!` invocation's lines, parsed from its tokens.
fn sources_list(path: &str, text: &str) -> Vec<ListedSource> {
    let file = parse(path, text);
    let mac = file
        .items
        .iter()
        .find_map(|i| match i {
            Item::Macro(m) if m.ident.is_none() && m.mac.path.is_ident("sources") => Some(&m.mac),
            _ => None,
        })
        .unwrap_or_else(|| panic!("{path}: no `sources! {{ … }}` invocation"));
    mac.parse_body_with(|input: syn::parse::ParseStream<'_>| {
        let mut out = Vec::new();
        while !input.is_empty() {
            input.call(Attribute::parse_outer)?;
            if input.is_empty() {
                break;
            }
            let kind: syn::LitStr = input.parse()?;
            input.parse::<Token![=>]>()?;
            let variant: syn::Ident = input.parse()?;
            let settings;
            syn::parenthesized!(settings in input);
            let settings: syn::TypePath = settings.parse()?;
            input.parse::<Token![,]>()?;
            out.push(ListedSource {
                kind: kind.value(),
                variant: variant.to_string(),
                settings: settings
                    .path
                    .segments
                    .iter()
                    .map(|s| s.ident.to_string())
                    .collect(),
            });
        }
        Ok(out)
    })
    .unwrap_or_else(|e| panic!("{path}: the sources! list: {e}"))
}

/// What is wrong with a `sources!` list declared in `list_path` (`…/sources/mod.rs`), given
/// the files that exist: every source's settings live in its own module, a file under
/// `sources/`; kinds and variants are unique; `null` (the minimal source) is listed, in
/// `null.rs`.
fn sources_list_problems(
    list_path: &str,
    list: &[ListedSource],
    files: &BTreeSet<String>,
) -> Vec<String> {
    let dir = list_path
        .strip_suffix("mod.rs")
        .unwrap_or_else(|| panic!("{list_path}: the list lives in a mod.rs"));
    let mut out = Vec::new();
    if list.is_empty() {
        out.push(format!("{list_path}: the sources! list is empty"));
    }
    let mut kinds = BTreeSet::new();
    let mut variants = BTreeSet::new();
    for s in list {
        if !kinds.insert(&s.kind) {
            out.push(format!("{list_path}: kind {:?} listed twice", s.kind));
        }
        if !variants.insert(&s.variant) {
            out.push(format!("{list_path}: variant {} listed twice", s.variant));
        }
        match s.settings.as_slice() {
            [module, _, ..] => {
                let own = [format!("{dir}{module}.rs"), format!("{dir}{module}/mod.rs")];
                if !own.iter().any(|f| files.contains(f)) {
                    out.push(format!(
                        "{list_path}: source {:?}: its settings {} are not in a file of its own under {dir} ({} or {})",
                        s.kind,
                        s.settings.join("::"),
                        own[0],
                        own[1]
                    ));
                }
            }
            _ => out.push(format!(
                "{list_path}: source {:?}: its settings type is not in a module of its own ({})",
                s.kind,
                s.settings.join("::")
            )),
        }
    }
    let null = list.iter().find(|s| s.kind == "null");
    if null.is_none_or(|s| s.settings.first().is_none_or(|m| m != "null"))
        || !files.contains(&format!("{dir}null.rs"))
    {
        out.push(format!(
            "{list_path}: `null`, the minimal source, is listed with its settings in {dir}null.rs"
        ));
    }
    out
}

const SOURCES_LIST: &str = "exporter/src/sources/mod.rs";

fn listed_sources() -> Vec<ListedSource> {
    sources_list(SOURCES_LIST, &read(SOURCES_LIST))
}

fn variants(list: &[ListedSource]) -> Vec<String> {
    list.iter().map(|s| s.variant.clone()).collect()
}

fn all_violations(
    files: &[(String, String)],
    rule: impl Fn(&str, &str) -> Vec<String>,
) -> Vec<String> {
    files.iter().flat_map(|(p, t)| rule(p, t)).collect()
}

// ---------------------------------------------------------------------------------------
// Structure: the length of functions, globs, who names what, metric names

/// A production function longer than this (from its `fn` to its closing brace) is refused.
const MAX_FN_LINES: usize = 80;

/// A token of Rust source, with strings, characters, lifetimes and comments left out.
enum Tok {
    Ident(String, usize),
    Punct(char, usize),
}

/// The identifiers and punctuation of `text`, each with its line (from 1).
fn tokens(text: &str) -> Vec<Tok> {
    let c: Vec<char> = text.chars().collect();
    let (mut i, mut line, mut out) = (0, 1, Vec::new());
    // Skips to just past `end` (a sequence) from `i`, counting lines.
    let skip_to = |i: &mut usize, line: &mut usize, end: &[char]| {
        while *i < c.len() && !c[*i..].starts_with(end) {
            if c[*i] == '\\' && end == ['"'] {
                if c.get(*i + 1) == Some(&'\n') {
                    *line += 1;
                }
                *i += 1;
            } else if c[*i] == '\n' {
                *line += 1;
            }
            *i += 1;
        }
        *i += end.len();
    };
    while i < c.len() {
        let ch = c[i];
        if ch == '\n' {
            line += 1;
            i += 1;
        } else if ch.is_whitespace() {
            i += 1;
        } else if c[i..].starts_with(&['/', '/']) {
            skip_to(&mut i, &mut line, &['\n']);
            line += 1;
        } else if c[i..].starts_with(&['/', '*']) {
            let mut depth = 0;
            while i < c.len() {
                if c[i..].starts_with(&['/', '*']) {
                    depth += 1;
                    i += 2;
                } else if c[i..].starts_with(&['*', '/']) {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    line += usize::from(c[i] == '\n');
                    i += 1;
                }
            }
        } else if ch == '"' {
            i += 1;
            skip_to(&mut i, &mut line, &['"']);
        } else if ch == '\'' {
            if c.get(i + 1) == Some(&'\\') {
                i += 3;
                skip_to(&mut i, &mut line, &['\'']);
            } else if c.get(i + 2) == Some(&'\'') {
                i += 3;
            } else {
                i += 1;
                while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                    i += 1;
                }
            }
        } else if ch.is_alphabetic() || ch == '_' {
            // A raw, byte or C string, or a byte character, before an identifier.
            let mut j = i;
            if matches!(c[j], 'b' | 'c') {
                j += 1;
            }
            let raw = c.get(j) == Some(&'r');
            if raw {
                j += 1;
            }
            let hashes = c[j..].iter().take_while(|x| **x == '#').count();
            if j > i && c.get(j + hashes) == Some(&'"') && (raw || hashes == 0) {
                i = j + hashes + 1;
                let mut end = vec!['"'];
                end.extend(std::iter::repeat_n('#', hashes));
                if raw {
                    while i < c.len() && !c[i..].starts_with(&end) {
                        line += usize::from(c[i] == '\n');
                        i += 1;
                    }
                    i += end.len();
                } else {
                    skip_to(&mut i, &mut line, &['"']);
                }
                continue;
            }
            if c[i] == 'b' && c.get(i + 1) == Some(&'\'') {
                i += 1;
                continue; // the character literal is skipped next
            }
            let start = i;
            while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                i += 1;
            }
            out.push(Tok::Ident(c[start..i].iter().collect(), line));
        } else {
            out.push(Tok::Punct(ch, line));
            i += 1;
        }
    }
    out
}

/// Every `fn NAME` of `text` that has a body, in order, with its length in lines from the
/// `fn` to the closing brace; `macro_rules!` bodies are left out.
fn fn_lengths(text: &str) -> Vec<(String, usize)> {
    let toks = tokens(text);
    let punct = |k: usize| match toks.get(k) {
        Some(Tok::Punct(p, _)) => Some(*p),
        _ => None,
    };
    // The index just past the group that opens at `k`.
    let close = |k: usize| {
        let mut depth = 0i32;
        let mut k = k;
        while k < toks.len() {
            match punct(k) {
                Some('{' | '(' | '[') => depth += 1,
                Some('}' | ')' | ']') => {
                    depth -= 1;
                    if depth == 0 {
                        return k + 1;
                    }
                }
                _ => {}
            }
            k += 1;
        }
        k
    };
    let mut out = Vec::new();
    let mut k = 0;
    while k < toks.len() {
        match &toks[k] {
            Tok::Ident(m, _) if m == "macro_rules" && punct(k + 1) == Some('!') => {
                let open = (k + 2..toks.len())
                    .find(|&j| matches!(punct(j), Some('{' | '(' | '[')))
                    .unwrap_or(toks.len());
                k = close(open);
                continue;
            }
            Tok::Ident(f, start) if f == "fn" => {
                if let Some(Tok::Ident(name, _)) = toks.get(k + 1) {
                    let mut j = k + 2;
                    let mut depth = 0i32;
                    while j < toks.len() {
                        match punct(j) {
                            Some('(' | '[') => depth += 1,
                            Some(')' | ']') => depth -= 1,
                            Some('{' | ';') if depth == 0 => break,
                            _ => {}
                        }
                        j += 1;
                    }
                    if punct(j) == Some('{') {
                        let end = close(j) - 1;
                        if let Some(Tok::Punct('}', last)) = toks.get(end) {
                            out.push((name.clone(), last - start + 1));
                        }
                    }
                }
            }
            _ => {}
        }
        k += 1;
    }
    out
}

/// The functions with a body that syn sees, in order: (name, `module::Type::name`, in test
/// code).
#[derive(Default)]
struct Fns {
    owner: Segs,
    test: u32,
    out: Vec<(String, String, bool)>,
}

impl Fns {
    fn record(&mut self, attrs: &[Attribute], ident: &syn::Ident, body: impl FnOnce(&mut Self)) {
        let t = u32::from(is_test(attrs));
        self.test += t;
        let name = ident.to_string();
        let mut path = self.owner.clone();
        path.push(name.clone());
        self.out
            .push((name.clone(), path.join("::"), self.test > 0));
        self.owner.push(name);
        body(self);
        self.owner.pop();
        self.test -= t;
    }
}

impl<'ast> Visit<'ast> for Fns {
    fn visit_item(&mut self, item: &'ast Item) {
        let t = u32::from(is_test(item_attrs(item)));
        self.test += t;
        let owner = match item {
            Item::Mod(m) => Some(m.ident.to_string()),
            Item::Impl(i) => Some(match &*i.self_ty {
                syn::Type::Path(p) => p
                    .path
                    .segments
                    .last()
                    .map_or_else(|| "_".into(), |s| s.ident.to_string()),
                _ => "_".into(),
            }),
            Item::Trait(tr) => Some(tr.ident.to_string()),
            _ => None,
        };
        if let Some(o) = &owner {
            self.owner.push(o.clone());
        }
        visit::visit_item(self, item);
        if owner.is_some() {
            self.owner.pop();
        }
        self.test -= t;
    }

    fn visit_item_fn(&mut self, f: &'ast syn::ItemFn) {
        self.record(&[], &f.sig.ident, |v| visit::visit_item_fn(v, f));
    }

    fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
        self.record(&f.attrs, &f.sig.ident, |v| visit::visit_impl_item_fn(v, f));
    }

    fn visit_trait_item_fn(&mut self, f: &'ast syn::TraitItemFn) {
        if f.default.is_some() {
            self.record(&f.attrs, &f.sig.ident, |v| visit::visit_trait_item_fn(v, f));
        } else {
            visit::visit_trait_item_fn(self, f);
        }
    }
}

/// The production functions of a file, as `crate::module::Type::name` (`core::…` for
/// `truthscale-core`, `exporter::…` for the exporter) with their length in lines.
fn production_fn_lengths(path: &str, text: &str) -> Vec<(String, usize)> {
    let file = parse(path, text);
    if is_test(&file.attrs) {
        return Vec::new();
    }
    let krate = if path.starts_with("truthscale-core/") {
        "core"
    } else {
        "exporter"
    };
    let mut fns = Fns {
        owner: std::iter::once(krate.to_string())
            .chain(place(path).module)
            .collect(),
        ..Fns::default()
    };
    fns.visit_file(&file);
    let lengths = fn_lengths(text);
    let mut j = 0;
    let mut out = Vec::new();
    for (name, qualified, test) in fns.out {
        while j < lengths.len() && lengths[j].0 != name {
            j += 1;
        }
        let (_, n) = lengths
            .get(j)
            .unwrap_or_else(|| panic!("{path}: fn {qualified} not found by the line counter"));
        if !test {
            out.push((qualified, *n));
        }
        j += 1;
    }
    out
}

/// The production functions (each with its length) over `MAX_FN_LINES`, each said once.
fn length_violations(fns: &[(String, usize)]) -> Vec<String> {
    let mut longest: BTreeMap<&str, usize> = BTreeMap::new();
    for (name, n) in fns {
        let e = longest.entry(name.as_str()).or_default();
        *e = (*e).max(*n);
    }
    longest
        .into_iter()
        .filter(|&(_, n)| n > MAX_FN_LINES)
        .map(|(name, n)| {
            format!("{name} is {n} lines: a function is at most {MAX_FN_LINES} lines; split it")
        })
        .collect()
}

/// Globs of an external crate's module allowed outside tests: (file, the glob).
const EXTERNAL_GLOBS: &[(&str, &str)] = &[
    ("exporter/src/report/html.rs", "plotters::prelude::*"),
    ("exporter/src/report/timeline.rs", "plotters::prelude::*"),
    ("exporter/src/report/funnel.rs", "plotters::prelude::*"),
    (
        "exporter/src/report/showback_html.rs",
        "plotters::prelude::*",
    ),
];

/// Outside tests, no glob imports a module of the same crate (`use super::*;`), and a glob of
/// an external crate is one of `EXTERNAL_GLOBS`.
fn glob_violations(path: &str, text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for n in facts(path, text).names {
        if n.path.last().is_none_or(|l| l != "*") {
            continue;
        }
        let written = n.path.join("::");
        if n.path.first().is_some_and(|r| r == "crate") {
            out.push(format!(
                "{path}: imports {written}: outside tests, a use names what it imports"
            ));
        } else if !EXTERNAL_GLOBS.contains(&(path, written.as_str())) {
            out.push(format!(
                "{path}: imports {written}: a glob of an external crate is refused unless on EXTERNAL_GLOBS"
            ));
        }
    }
    out
}

/// Paths of the core's fleet analysis or showback a command may name: the fleet
/// configuration `report` builds from its flags.
const COMMAND_CORE_NAMES: &[&str] = &[
    "truthscale_core::fleet::FleetConfig",
    "truthscale_core::fleet::IDLE_BUSY_BELOW",
    "truthscale_core::fleet::IDLE_COMPUTE_BELOW",
];

/// The report's renderers, the page's parts among them: they read the sections, never
/// compute them. (`report/funnel.rs` both builds the funnel section from the showback and
/// draws it.)
const RENDERERS: &[&str] = &[
    "exporter/src/report/text.rs",
    "exporter/src/report/html.rs",
    "exporter/src/report/timeline.rs",
    "exporter/src/report/showback_html.rs",
    "exporter/src/report/waits.rs",
];

/// A command names neither the core's fleet analysis nor its showback (but the
/// `COMMAND_CORE_NAMES`); a renderer runs neither analysis and reads no history.
fn report_violations(path: &str, text: &str) -> Vec<String> {
    let command = place(path).module.first().is_some_and(|m| m == "commands");
    let renderer = RENDERERS.contains(&path);
    if !command && !renderer {
        return Vec::new();
    }
    let mut out = Vec::new();
    for n in facts(path, text).names {
        let written = n.path.join("::");
        let p: Vec<&str> = n.path.iter().map(String::as_str).collect();
        if command
            && matches!(p.as_slice(), ["truthscale_core", "fleet" | "showback", ..])
            && !COMMAND_CORE_NAMES
                .iter()
                .any(|a| written == *a || written.starts_with(&format!("{a}::")))
        {
            out.push(format!(
                "{path}: names {written}: a command hands its flags to report, which analyzes"
            ));
        }
        if renderer
            && matches!(
                p.as_slice(),
                ["truthscale_core", "fleet", "analyze" | "*"]
                    | ["truthscale_core", "showback", "showback" | "*"]
                    | ["crate", "history", ..]
            )
        {
            out.push(format!(
                "{path}: names {written}: a renderer reads the sections, it analyzes nothing"
            ));
        }
    }
    out
}

/// The one caller of the exposition's encoder.
const PUBLISHER: &str = "exporter/src/publish.rs";

/// Outside `publish.rs`, the exporter never names `truthscale_core::exposition::encode`: the
/// publisher encodes once per tick, and the HTTP layer and sinks read what it published.
fn encode_violations(path: &str, text: &str) -> Vec<String> {
    if path == PUBLISHER || path.starts_with("truthscale-core/") {
        return Vec::new();
    }
    facts(path, text)
        .names
        .iter()
        .filter(|n| {
            matches!(n.path.as_slice(), [c, e, last] if c == "truthscale_core" && e == "exposition"
                && (last == "encode" || last == "*"))
        })
        .map(|n| {
            format!(
                "{path}: names {}: only the publisher encodes the exposition",
                n.path.join("::")
            )
        })
        .collect()
}

/// The pipeline is handed its source's label at start (by `compose`) and has nothing to
/// compare: outside tests, no file of `pipeline/` asks a source its name or kind, compares
/// anything to a string literal (`==`, `!=`, `.eq("…")`, `.starts_with("…")`, …) or matches
/// against one (`match`, `matches!`), so it cannot branch on which source it runs, through a
/// local variable or otherwise.
fn pipeline_violations(path: &str, text: &str) -> Vec<String> {
    if top_module(path) != "pipeline" {
        return Vec::new();
    }
    struct Compares(Vec<String>);
    const STR_METHODS: &[&str] = &[
        "eq",
        "ne",
        "starts_with",
        "ends_with",
        "contains",
        "eq_ignore_ascii_case",
    ];
    impl<'ast> Visit<'ast> for Compares {
        skip_test_items!();
        fn visit_expr_method_call(&mut self, m: &'ast syn::ExprMethodCall) {
            let method = m.method.to_string();
            if (method == "name" || method == "kind")
                && m.args.is_empty()
                && names_a_source(&m.receiver)
            {
                self.0.push(format!("asks its source's {method}()"));
            }
            if STR_METHODS.contains(&method.as_str()) && m.args.iter().any(is_str) {
                self.0
                    .push(format!("compares to a string with .{method}(\"…\")"));
            }
            visit::visit_expr_method_call(self, m);
        }
        fn visit_expr_binary(&mut self, b: &'ast syn::ExprBinary) {
            if matches!(b.op, syn::BinOp::Eq(_) | syn::BinOp::Ne(_))
                && (is_str(&b.left) || is_str(&b.right))
            {
                self.0.push("compares to a string literal".into());
            }
            visit::visit_expr_binary(self, b);
        }
        fn visit_expr_match(&mut self, m: &'ast syn::ExprMatch) {
            if m.arms.iter().any(|a| pat_has_str(&a.pat)) {
                self.0.push("matches against a string literal".into());
            }
            visit::visit_expr_match(self, m);
        }
        fn visit_macro(&mut self, mac: &'ast syn::Macro) {
            if mac.path.is_ident("matches") && mac.tokens.to_string().contains('"') {
                self.0.push("matches! against a string literal".into());
            }
        }
    }
    let mut found = Compares(Vec::new());
    found.visit_file(&parse(path, text));
    found
        .0
        .into_iter()
        .map(|what| {
            format!(
                "{path}: {what}: the pipeline is handed its source's label at start and never \
                 asks or compares which source it runs"
            )
        })
        .collect()
}

/// The modules directly under `sources/` (`nvml`, `sim`, `replay`, …).
fn source_modules(files: &[(String, String)]) -> BTreeSet<String> {
    files
        .iter()
        .filter_map(|(p, _)| {
            let m = place(p).module;
            (m.len() >= 2 && m[0] == "sources").then(|| m[1].clone())
        })
        .collect()
}

/// `sources/`, file by file: outside `sources/`, its list (`sources/mod.rs`, which names each
/// source's type) and the commands (the CLI's leaf, where
/// `doctor` opens NVML as the NVML source does), nothing names what lies inside one source's
/// module (`crate::sources::nvml::…`), only what `sources/mod.rs` shares; and inside it, no
/// source names another's files. So a helper that other modules need cannot live in a
/// source's folder: it belongs beside the sources (as `cgroup` does).
fn source_file_violations(path: &str, text: &str, modules: &BTreeSet<String>) -> Vec<String> {
    let module = place(path).module;
    let top = module.first().map_or("crate", String::as_str);
    if top == "commands" || path == SOURCES_LIST || path.starts_with("truthscale-core/") {
        return Vec::new();
    }
    let own = (top == "sources").then(|| module.get(1)).flatten();
    facts(path, text)
        .names
        .iter()
        .filter_map(|n| match n.path.as_slice() {
            [c, s, m, _, ..] if c == "crate" && s == "sources" && modules.contains(m) => {
                (own != Some(m)).then(|| {
                    format!(
                        "{path}: names {}: only the source `{m}` (and the commands) reach inside \
                         sources/{m}/; a helper shared with others lives outside sources/",
                        n.path.join("::")
                    )
                })
            }
            _ => None,
        })
        .collect()
}

/// The files of the fleet report's path: the core's fleet analysis and showback, the
/// history reader, the report and its command.
const REPORT_PATH: &[&str] = &[
    "truthscale-core/src/fleet",
    "truthscale-core/src/showback",
    "exporter/src/history",
    "exporter/src/report",
    "exporter/src/commands/report.rs",
];

/// The most lines a production file on the report's path holds.
const MAX_FILE_LINES: usize = 700;

/// A production file on the report's path is at most [`MAX_FILE_LINES`] lines.
fn file_length_violations(path: &str, text: &str) -> Vec<String> {
    let lines = text.lines().count();
    if REPORT_PATH.iter().any(|p| path.starts_with(p)) && lines > MAX_FILE_LINES {
        vec![format!(
            "{path}: {lines} lines: a file on the report's path holds at most {MAX_FILE_LINES}; \
             split it by concern (tests in their own file)"
        )]
    } else {
        Vec::new()
    }
}

/// `sinks` names neither the sources, the sampler nor the composition root, and calls no
/// `sample`: a sink reads the published snapshot.
fn sink_violations(path: &str, text: &str) -> Vec<String> {
    if top_module(path) != "sinks" {
        return Vec::new();
    }
    struct Samples(usize);
    impl<'ast> Visit<'ast> for Samples {
        skip_test_items!();
        fn visit_expr_method_call(&mut self, m: &'ast syn::ExprMethodCall) {
            self.0 += usize::from(m.method == "sample");
            visit::visit_expr_method_call(self, m);
        }
    }
    let mut out = Vec::new();
    for n in facts(path, text).names {
        if let [root, to, ..] = n.path.as_slice()
            && root == "crate"
            && (to == "sources" || to == "pipeline" || to == "compose")
        {
            out.push(format!(
                "{path}: names {}: a sink reads the snapshot, never a source or the sampler",
                n.path.join("::")
            ));
        }
    }
    let mut samples = Samples(0);
    samples.visit_file(&parse(path, text));
    if samples.0 > 0 {
        out.push(format!("{path}: calls `.sample(…)`: a sink never samples"));
    }
    out
}

/// The string literals outside the catalog that name a `truthscale_*` metric family today,
/// as (file, family): the exporter's own series it counts or reads back by name. The list
/// only shrinks: a new name belongs in the catalog.
const METRIC_NAME_LITERALS: &[(&str, &str)] = &[
    (
        "exporter/src/attribution/mod.rs",
        "truthscale_source_errors_total",
    ),
    (
        "exporter/src/commands/doctor.rs",
        "truthscale_source_errors_total",
    ),
    (
        "exporter/src/enrichment/mod.rs",
        "truthscale_serving_engine_up",
    ),
    (
        "exporter/src/enrichment/mod.rs",
        "truthscale_source_errors_total",
    ),
    ("exporter/src/history/mod.rs", "truthscale_gpu_"),
    (
        "exporter/src/pipeline/background.rs",
        "truthscale_source_errors_total",
    ),
    ("exporter/src/pipeline/mod.rs", "truthscale_gpu_up"),
    (
        "exporter/src/pipeline/mod.rs",
        "truthscale_source_errors_total",
    ),
    ("exporter/src/pipeline/mod.rs", "truthscale_source_up"),
    (
        "exporter/src/pipeline/served.rs",
        "truthscale_derivation_diagnostics_total",
    ),
    ("exporter/src/publish.rs", "truthscale_series_dropped_total"),
    (
        "exporter/src/report/showback.rs",
        "truthscale_gpu_allocation_info",
    ),
];

/// The catalog: where the metric families are named.
const CATALOG: &str = "truthscale-core/src/catalog.rs";

/// The `truthscale_*` metric families a string names (the crates' own names are not).
fn metric_names(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (i, _) in s.match_indices("truthscale_") {
        if s[..i]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
        {
            continue;
        }
        let name: String = s[i..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if name.len() > "truthscale_".len()
            && name != "truthscale_core"
            && name != "truthscale_exporter"
        {
            out.push(name);
        }
    }
    out
}

/// The string literals of a file's non-test code (doc comments are attributes, not counted),
/// macro arguments included.
fn string_literals(path: &str, text: &str) -> Vec<String> {
    #[derive(Default)]
    struct Lits(Vec<String>);
    impl Lits {
        fn scan(&mut self, mut c: Cursor<'_>) {
            while !c.eof() {
                if let Some((inside, _, _, next)) = c.any_group() {
                    self.scan(inside);
                    c = next;
                } else if let Some((lit, next)) = c.literal() {
                    if let Ok(syn::Lit::Str(s)) = syn::parse_str::<syn::Lit>(&lit.to_string()) {
                        self.0.push(s.value());
                    }
                    c = next;
                } else if let Some((_, next)) = c.token_tree() {
                    c = next;
                } else {
                    break;
                }
            }
        }
    }
    impl<'ast> Visit<'ast> for Lits {
        skip_test_items!();
        fn visit_attribute(&mut self, _: &'ast Attribute) {}
        fn visit_lit_str(&mut self, s: &'ast syn::LitStr) {
            self.0.push(s.value());
        }
        fn visit_macro(&mut self, mac: &'ast syn::Macro) {
            self.scan(TokenBuffer::new2(mac.tokens.clone()).begin());
        }
    }
    let file = parse(path, text);
    if is_test(&file.attrs) {
        return Vec::new();
    }
    let mut lits = Lits::default();
    lits.visit_file(&file);
    lits.0
}

/// Outside the catalog, no non-test string literal names a `truthscale_*` metric family but
/// the pairs of `METRIC_NAME_LITERALS`.
fn metric_literal_violations(path: &str, text: &str) -> Vec<String> {
    if path == CATALOG {
        return Vec::new();
    }
    let names: BTreeSet<String> = string_literals(path, text)
        .iter()
        .flat_map(|s| metric_names(s))
        .collect();
    names
        .into_iter()
        .filter(|m| !METRIC_NAME_LITERALS.contains(&(path, m.as_str())))
        .map(|m| {
            format!(
                "{path}: a string literal names the metric family {m}: metric names live in the catalog ({CATALOG})"
            )
        })
        .collect()
}

// ---------------------------------------------------------------------------------------
// The invariants, on the real tree

/// Architecture Invariant: the exporter's modules import each other without cycles.
#[test]
fn no_import_cycles_between_exporter_modules() {
    let graph = import_graph(&crate_files("exporter/src"));
    // The resolver sees the imports it is about.
    for (from, to) in [
        ("cli", "commands"),
        ("pipeline", "sources"),
        ("http", "publish"),
    ] {
        assert!(
            graph.get(from).is_some_and(|d| d.contains(to)),
            "{from} imports {to}:\n{}",
            graph_text(&graph)
        );
    }
    if let Some(cycle) = find_cycle(&graph) {
        panic!(
            "import cycle: {}\nthe graph:\n{}",
            cycle.join(" -> "),
            graph_text(&graph)
        );
    }
}

/// Architecture Invariant: only `cli` names `commands`; no command imports another, and
/// nothing below the commands (sources, sinks, http, the sampler, configuration) imports one.
#[test]
fn nothing_below_the_commands_imports_them() {
    let files = crate_files("exporter/src");
    let tops: BTreeSet<String> = files.iter().map(|(p, _)| top_module(p)).collect();
    assert!(
        tops.contains("cli") && tops.contains("commands"),
        "{tops:?}"
    );
    let v = all_violations(&files, command_violations);
    assert!(v.is_empty(), "{}", v.join("\n"));
}

/// Architecture Invariant: `truthscale-core` performs no I/O and never reads the clock.
#[test]
fn core_has_no_io_and_no_clock() {
    let files = crate_files("truthscale-core/src");
    let v = all_violations(&files, core_io_violations);
    assert!(v.is_empty(), "{}", v.join("\n"));
}

/// Architecture Invariant: `truthscale-core` depends only on an allow-list of crates.
#[test]
fn the_core_depends_only_on_its_allow_list() {
    let manifest: toml::Table =
        toml::from_str(&read("truthscale-core/Cargo.toml")).expect("truthscale-core/Cargo.toml");
    let keys = |v: Option<&toml::Value>| -> Vec<String> {
        v.and_then(toml::Value::as_table)
            .map(|t| t.keys().cloned().collect())
            .unwrap_or_default()
    };
    let mut deps: BTreeSet<String> = keys(manifest.get("dependencies")).into_iter().collect();
    if let Some(targets) = manifest.get("target").and_then(toml::Value::as_table) {
        for t in targets.values() {
            deps.extend(keys(t.get("dependencies")));
        }
    }
    let allowed: BTreeSet<String> = CORE_DEPENDENCIES.iter().map(|d| d.to_string()).collect();
    assert_eq!(
        deps, allowed,
        "truthscale-core's dependencies changed: the core stays pure and small; if the new \
         dependency does no I/O and reads no clock, add it to CORE_DEPENDENCIES in \
         tests/architecture/tests/architecture.rs and to the core's dependency invariant in ARCHITECTURE.md"
    );
    let doc = read("ARCHITECTURE.md");
    let line = doc
        .lines()
        .skip_while(|l| !l.contains("depends only on"))
        .take_while(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    for d in CORE_DEPENDENCIES {
        assert!(
            line.contains(&format!("`{d}`")),
            "ARCHITECTURE.md's core dependency invariant names `{d}`: {line}"
        );
    }
}

/// Architecture Invariant: the only `unsafe` code is in `sources/nvml/raw.rs`.
#[test]
fn unsafe_only_in_the_raw_nvml_module() {
    for src in ["exporter/src", "truthscale-core/src"] {
        let mut paths = Vec::new();
        rust_files(&workspace().join(src), &mut paths);
        for p in paths {
            if p.ends_with("sources/nvml/raw.rs") {
                continue;
            }
            let rel = p.strip_prefix(workspace()).expect("in the workspace");
            let rel = rel.to_string_lossy().replace('\\', "/");
            let text = std::fs::read_to_string(&p).expect("read");
            let v = unsafe_code(&rel, &text);
            assert!(v.is_empty(), "{}", v.join("\n"));
        }
    }
}

/// Architecture Invariant: a scrape never samples: the HTTP layer names no source and no
/// sampler, only the snapshot; nor does it compress (the sampler gzips once per tick).
#[test]
fn http_never_samples() {
    let files = crate_files("exporter/src");
    let tops: BTreeSet<String> = files.iter().map(|(p, _)| top_module(p)).collect();
    for m in ["http", "sources", "pipeline"] {
        assert!(
            tops.contains(m),
            "the module `{m}` this rule is about: {tops:?}"
        );
    }
    let v = all_violations(&files, http_violations);
    assert!(v.is_empty(), "{}", v.join("\n"));
}

/// Architecture Invariant: the process environment is read once.
#[test]
fn the_environment_is_read_once() {
    let files = crate_files("exporter/src");
    assert!(files.iter().any(|(p, _)| p == ENVIRONMENT_READER));
    let v = all_violations(&files, environment_violations);
    assert!(v.is_empty(), "{}", v.join("\n"));
}

#[test]
fn caught_a_second_read_of_the_environment() {
    for text in [
        "fn f() -> Option<String> { std::env::var(\"X\").ok() }",
        "use std::env; fn f() -> bool { env::var_os(\"X\").is_some() }",
        "use std::{env::{self as e}}; fn f() { let _ = e::vars_os(); }",
    ] {
        let v = environment_violations("exporter/src/history/mod.rs", text);
        assert!(!v.is_empty(), "not caught: {text}");
    }
    let reader = "fn f() { let _ = std::env::vars_os(); }";
    assert!(environment_violations(ENVIRONMENT_READER, reader).is_empty());
}

/// Architecture Invariant: the pipeline never sees the configuration: it is handed a built
/// source and built stages by the composition root (`compose`), so it cannot ask which source
/// it runs.
#[test]
fn the_pipeline_is_handed_what_it_runs() {
    let files = crate_files("exporter/src");
    let graph = import_graph(&files);
    let pipeline = graph.get("pipeline").expect("the pipeline module");
    for forbidden in [
        "config",
        "compose",
        "attribution",
        "enrichment",
        "commands",
        "cli",
    ] {
        assert!(
            !pipeline.contains(forbidden),
            "pipeline imports {forbidden}: {pipeline:?}"
        );
    }
    for (path, text) in files.iter().filter(|(p, _)| top_module(p) == "pipeline") {
        for forbidden in ["SourceConfig", "Settings", "source.kind()"] {
            assert!(!text.contains(forbidden), "{path} names {forbidden}");
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
/// list in `sources/mod.rs`: nothing outside `sources/` matches on the configured source or
/// asks which it is, and inside it the variants are written out only by that list (and the
/// default).
#[test]
fn only_sources_match_on_the_source_config() {
    let list = listed_sources();
    let files = crate_files("exporter/src");
    let paths: BTreeSet<String> = files.iter().map(|(p, _)| p.clone()).collect();
    let problems = sources_list_problems(SOURCES_LIST, &list, &paths);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    let variants = variants(&list);
    let v = all_violations(&files, |p, t| source_config_violations(p, t, &variants));
    assert!(v.is_empty(), "{}", v.join("\n"));
}

/// The graph in ARCHITECTURE.md: each arrow between two modules is backed by an import, in
/// one direction or the other (the arrows show the data's way, not who imports whom), and
/// each module it names exists.
#[test]
fn the_mermaid_graph_matches_the_imports() {
    let doc = read("ARCHITECTURE.md");
    let graph = doc
        .split_once("```mermaid")
        .and_then(|(_, rest)| rest.split_once("```"))
        .expect("a mermaid graph in ARCHITECTURE.md")
        .0;
    // Crate prefix in the graph → (source dir, name other crates use).
    let crates = [
        ("core", "truthscale-core/src", "truthscale_core"),
        ("exporter", "exporter/src", "truthscale_exporter"),
    ];
    // Every file's module path and the paths it names, both as "<crate prefix>::…".
    let mut named: Vec<(Segs, Vec<Segs>)> = Vec::new();
    for (prefix, src, _) in crates {
        for (p, t) in crate_files(src) {
            let module: Segs = std::iter::once(prefix.to_string())
                .chain(place(&p).module)
                .collect();
            let paths = facts(&p, &t)
                .names
                .into_iter()
                .filter_map(|n| {
                    let (first, rest) = n.path.split_first()?;
                    let root = if first == "crate" {
                        prefix
                    } else {
                        crates.iter().find(|c| c.2 == first)?.0
                    };
                    Some(
                        std::iter::once(root.to_string())
                            .chain(rest.iter().cloned())
                            .collect(),
                    )
                })
                .collect();
            named.push((module, paths));
        }
    }
    // A node's label names a module or an item of one (`core::model::Sample`): the longest
    // prefix that is a module.
    let module_of = |label: &str| -> Option<Segs> {
        let segs: Segs = label.split("::").map(String::from).collect();
        if segs.len() < 2 || !crates.iter().any(|c| c.0 == segs[0]) {
            return None;
        }
        (2..=segs.len())
            .rev()
            .map(|n| segs[..n].to_vec())
            .find(|m| named.iter().any(|(f, _)| f.starts_with(m)))
            .or_else(|| panic!("ARCHITECTURE.md's graph names {label}, which is no module"))
    };
    let mut nodes: HashMap<String, Option<Segs>> = HashMap::new();
    let mut arrows = Vec::new();
    for line in graph.lines().map(str::trim).filter(|l| l.contains("-->")) {
        let ids: Vec<String> = line
            .split("-->")
            .map(|part| {
                let part = part.trim();
                let (id, label) = match part.split_once('[') {
                    Some((id, label)) => (id.trim(), Some(label)),
                    None => (part, None),
                };
                if let Some(label) = label {
                    let first = label.split(['<', ']']).next().unwrap_or_default().trim();
                    nodes.insert(id.to_string(), module_of(first));
                }
                id.to_string()
            })
            .collect();
        arrows.extend(ids.windows(2).map(|w| (w[0].clone(), w[1].clone())));
    }
    assert!(arrows.len() > 5, "read the graph's arrows: {arrows:?}");
    let names = |from: &Segs, to: &Segs| {
        named
            .iter()
            .filter(|(f, _)| f.starts_with(from))
            .any(|(_, paths)| paths.iter().any(|p| p.starts_with(to)))
    };
    let mut checked = 0;
    for (a, b) in arrows {
        let (Some(Some(ma)), Some(Some(mb))) = (nodes.get(&a), nodes.get(&b)) else {
            continue;
        };
        checked += 1;
        assert!(
            names(ma, mb) || names(mb, ma),
            "ARCHITECTURE.md's graph has {a} --> {b}, but neither {} nor {} names the other",
            ma.join("::"),
            mb.join("::")
        );
    }
    assert!(checked > 5, "checked the arrows between modules");
}

// ---------------------------------------------------------------------------------------
// The rules catch what they are about (synthetic files)

#[test]
fn caught_a_command_importing_another_through_super() {
    let v = command_violations(
        "exporter/src/commands/top.rs",
        "use super::analyze::AnalyzeArgs;",
    );
    assert_eq!(v.len(), 1, "{v:?}");
    assert!(
        v[0].contains("crate::commands::analyze::AnalyzeArgs"),
        "{v:?}"
    );
    // Also through `self::super`, a glob of the commands, a path in an expression, and a
    // binding of the commands module.
    for text in [
        "use self::super::serve;",
        "use super::*;",
        "fn f() { crate::commands::serve::run(); }",
        "use crate::commands as c; fn f() { c::doctor::run(); }",
        "fn f() { let _ = format!(\"{}\", super::explain::NAME); }",
    ] {
        let v = command_violations("exporter/src/commands/top.rs", text);
        assert!(!v.is_empty(), "not caught: {text}");
    }
    // A command's own submodules and its tests are its own.
    for text in [
        "use crate::commands::top::Feed;",
        "mod widgets { use super::super::top::Feed; }",
        "#[cfg(test)] mod tests { use super::super::analyze::AnalyzeArgs; }",
    ] {
        let v = command_violations("exporter/src/commands/top.rs", text);
        assert!(v.is_empty(), "{text}: {v:?}");
    }
    let v = command_violations("exporter/src/commands/top/widgets.rs", "use super::Feed;");
    assert!(v.is_empty(), "{v:?}");
    let v = command_violations("exporter/src/cli.rs", "use crate::commands::{serve, top};");
    assert!(v.is_empty(), "{v:?}");
}

#[test]
fn caught_a_grouped_import_of_a_command_from_below() {
    let v = command_violations("exporter/src/config.rs", "use crate::{commands::serve};");
    assert_eq!(v.len(), 1, "{v:?}");
    for (path, text) in [
        (
            "exporter/src/sinks/otlp/mod.rs",
            "use super::super::commands::serve::ServeArgs;",
        ),
        ("exporter/src/http/web.rs", "use crate::{cli::Cli};"),
        (
            "exporter/src/pipeline/mod.rs",
            "fn f(a: &crate::commands::top::TopArgs) {}",
        ),
        (
            "exporter/src/sources/sim.rs",
            "use truthscale_exporter::commands::simulate;",
        ),
    ] {
        assert!(
            !command_violations(path, text).is_empty(),
            "not caught: {path}: {text}"
        );
    }
}

#[test]
fn caught_a_grouped_std_import_in_the_core() {
    let v = core_io_violations("truthscale-core/src/derive.rs", "use std::{fs, io::Read};");
    assert_eq!(v.len(), 1, "{v:?}");
    assert!(v[0].contains("std::fs"), "{v:?}");
    for text in [
        "fn f() -> std::time::Instant { std::time::Instant::now() }",
        "use std::time::{Duration, SystemTime};",
        "use std::time; fn f() { let _ = time::SystemTime::now(); }",
        "use std as s; fn f() { let _ = s::env::var_os(\"X\"); }",
        "use std::thread::*;",
        "fn f() { let _ = ::std::process::id(); }",
        "fn f() { let _ = format!(\"{:?}\", std::env::args()); }",
        "fn f() { let _ = time::OffsetDateTime::now_utc(); }",
        "fn f() { println!(\"hello\"); }",
        // A test module before the code does not hide it: test code is told by attribute.
        "#[cfg(test)] mod tests {}\nuse std::net::TcpStream;",
    ] {
        let v = core_io_violations("truthscale-core/src/parse/dmon.rs", text);
        assert!(!v.is_empty(), "not caught: {text}");
    }
    for text in [
        "#[cfg(test)] mod tests { use std::fs; }",
        "#[test] fn t() { let _ = std::fs::read(\"x\"); }",
        "#[cfg(all(test, unix))] fn t() { let _ = std::env::var(\"x\"); }",
        "use std::time::Duration; use std::io::Write; use std::fmt::Write as _;",
    ] {
        let v = core_io_violations("truthscale-core/src/derive.rs", text);
        assert!(v.is_empty(), "{text}: {v:?}");
    }
}

#[test]
fn caught_the_sampler_asking_which_source_runs() {
    let variants = variants(&listed_sources());
    let text = "fn f(settings: &Settings) -> bool { settings.source.kind() == \"nvml\" }";
    let v = source_config_violations("exporter/src/pipeline/mod.rs", text, &variants);
    assert!(!v.is_empty(), "{v:?}");
    for text in [
        "fn f(s: &Settings) { if s.source.kind() != \"sim\" {} }",
        "fn f(&self) -> bool { self.source.name() == \"replay\" }",
        "fn f(&self) { match self.source.name() { \"nvml\" | \"auto\" => {} _ => {} } }",
        "fn f(s: &Settings) { assert_eq!(s.source.kind(), \"nvml\"); }",
        "fn f(s: &Settings) { tracing::info!(kind = %s.source.kind(), \"x\"); }",
    ] {
        let v = source_config_violations("exporter/src/pipeline/stage.rs", text, &variants);
        assert!(!v.is_empty(), "not caught: {text}");
        // sources/ may.
        let v = source_config_violations("exporter/src/sources/engine.rs", text, &variants);
        assert!(v.is_empty(), "{text}: {v:?}");
    }
    // A source's name as a label, and the kind of a configuration layer, are not questions.
    let text = "fn f(&self) { let kind = self.source.name(); let _ = own.source.config.kind(); }";
    let v = source_config_violations("exporter/src/pipeline/mod.rs", text, &variants);
    assert!(v.is_empty(), "{v:?}");
}

#[test]
fn caught_an_alias_of_the_source_config() {
    let variants = variants(&listed_sources());
    let text = "use crate::sources::SourceConfig as Sc;\n\
                fn f(c: &Sc) -> bool { matches!(c, Sc::Nvml(..)) }";
    let v = source_config_violations("exporter/src/pipeline/mod.rs", text, &variants);
    assert!(!v.is_empty(), "{v:?}");
    assert!(v[0].contains("crate::sources::SourceConfig::Nvml"), "{v:?}");
    for text in [
        "use crate::sources::SourceConfig as Sc; fn f(c: &Sc) { match c { Sc::Sim(_) => {} _ => {} } }",
        "use crate::sources::{self as s}; fn f() -> s::SourceConfig { s::SourceConfig::Null(Default::default()) }",
        "use super::sources::SourceConfig::*;",
        "use crate::sources::SourceConfig::{Replay};",
        "fn f(c: &crate::sources::SourceConfig) -> bool { if let crate::sources::SourceConfig::DcgmExporter(_) = c { true } else { false } }",
        "use crate::sources::SourceConfig; impl Default for SourceConfig { fn default() -> Self { Self::Auto(Default::default()) } }",
    ] {
        let v = source_config_violations("exporter/src/config.rs", text, &variants);
        assert!(!v.is_empty(), "not caught: {text}");
    }
    // Its methods and constants are for everyone.
    let text = "use crate::sources::SourceConfig as Sc;\n\
                fn f() { let _ = Sc::default(); let _ = Sc::KINDS; let _ = Sc::shorthand(\"sim\"); }";
    let v = source_config_violations("exporter/src/config.rs", text, &variants);
    assert!(v.is_empty(), "{v:?}");
    // Inside sources/, only the default in the list's own file writes a variant out.
    let default = "impl Default for SourceConfig { fn default() -> Self { SourceConfig::Sim(sim::SimConfig::default()) } }";
    assert!(source_config_violations(SOURCES_LIST, default, &variants).is_empty());
    let v = source_config_violations("exporter/src/sources/nvml/mod.rs", default, &variants);
    assert!(!v.is_empty());
    let elsewhere = "fn f() -> SourceConfig { SourceConfig::Sim(sim::SimConfig::default()) }";
    assert!(!source_config_violations(SOURCES_LIST, elsewhere, &variants).is_empty());
}

#[test]
fn a_new_line_in_the_sources_list_is_derived_not_a_failure() {
    let text = read(SOURCES_LIST);
    let listed = listed_sources();
    // `foo` (or `foo1`, … should a real source take the name).
    let (kind, variant) = (0..)
        .map(|n| match n {
            0 => ("foo".to_string(), "Foo".to_string()),
            n => (format!("foo{n}"), format!("Foo{n}")),
        })
        .find(|(k, v)| !listed.iter().any(|s| s.kind == *k || s.variant == *v))
        .expect("a free name");
    let null_line = "\"null\" => Null(null::NullConfig),";
    assert!(
        text.contains(null_line),
        "the sources! list has {null_line}"
    );
    let with_foo = text.replace(
        null_line,
        &format!(
            "{null_line}\n    /// A new source.\n    \"{kind}\" => {variant}({kind}::FooConfig),"
        ),
    );
    let list = sources_list(SOURCES_LIST, &with_foo);
    assert_eq!(list.len(), listed.len() + 1);
    let foo = ListedSource {
        kind: kind.clone(),
        variant: variant.clone(),
        settings: vec![kind.clone(), "FooConfig".into()],
    };
    assert!(list.contains(&foo), "{list:?}");
    let mut files: BTreeSet<String> = crate_files("exporter/src")
        .into_iter()
        .map(|(p, _)| p)
        .collect();
    let foo_file = format!("exporter/src/sources/{kind}.rs");
    files.insert(foo_file.clone());
    let problems = sources_list_problems(SOURCES_LIST, &list, &files);
    assert!(problems.is_empty(), "{problems:?}");
    // Its variant is one the rule knows, at once.
    let v = source_config_violations(
        "exporter/src/pipeline/mod.rs",
        &format!(
            "use crate::sources::SourceConfig; fn f(c: &SourceConfig) -> bool {{ matches!(c, SourceConfig::{variant}(_)) }}"
        ),
        &variants(&list),
    );
    assert!(!v.is_empty());
    // Without its file, or without null, the list is wrong.
    files.remove(&foo_file);
    let problems = sources_list_problems(SOURCES_LIST, &list, &files);
    assert!(
        problems.iter().any(|p| p.contains(&format!("{kind:?}"))),
        "{problems:?}"
    );
    let without_null = text.replace(null_line, "");
    let list = sources_list(SOURCES_LIST, &without_null);
    let problems = sources_list_problems(SOURCES_LIST, &list, &files);
    assert!(problems.iter().any(|p| p.contains("null")), "{problems:?}");
}

#[test]
fn caught_http_naming_the_sampler_or_compressing() {
    for text in [
        "use crate::{pipeline::Sampler};",
        "use super::super::sources::Source;",
        "fn f(b: &[u8]) { let _ = flate2::write::GzEncoder::new(Vec::new(), Default::default()); }",
        "fn f(b: &[u8]) { let _ = crate::publish::gzip(b); }",
    ] {
        assert!(
            !http_violations("exporter/src/http/web.rs", text).is_empty(),
            "not caught: {text}"
        );
    }
    let text = "use crate::publish::Snapshot;";
    assert!(http_violations("exporter/src/http/mod.rs", text).is_empty());
}

#[test]
fn caught_unsafe_code_and_cycles() {
    for text in [
        "fn f() { unsafe { g() } }",
        "unsafe fn f() {}",
        "unsafe impl Send for X {}",
        "unsafe extern \"C\" { fn g(); }",
    ] {
        assert!(
            !unsafe_code("exporter/src/view.rs", text).is_empty(),
            "not caught: {text}"
        );
    }
    let files = [
        (
            "exporter/src/config.rs".to_string(),
            "use crate::sources::SourceConfig;".to_string(),
        ),
        (
            "exporter/src/sources/mod.rs".to_string(),
            "use super::config::Settings;".to_string(),
        ),
    ];
    assert_eq!(
        find_cycle(&import_graph(&files)),
        Some(vec!["config".into(), "sources".into(), "config".into()])
    );
}

/// The exporter's import graph between top-level modules, for reading:
/// `cargo test -p truthscale-exporter --lib architecture::print_import_graph -- --nocapture`.
#[test]
fn print_import_graph() {
    let graph = import_graph(&crate_files("exporter/src"));
    // Every top-level module of the exporter is in it.
    for m in [
        "cli",
        "commands",
        "pipeline",
        "sources",
        "attribution",
        "publish",
        "http",
    ] {
        assert!(
            graph.contains_key(m),
            "{m} missing:\n{}",
            graph_text(&graph)
        );
    }
    println!("{}", graph_text(&graph));
}

/// Each `Architecture Invariant:` paragraph of ARCHITECTURE.md ends by naming what holds it
/// (a test, a lint, the compiler), and each test it names exists.
#[test]
fn every_invariant_names_what_holds_it() {
    let doc = read("ARCHITECTURE.md");
    let mut paragraphs = Vec::new();
    let mut current: Option<String> = None;
    for line in doc.lines() {
        if line.starts_with("**Architecture Invariant:**") {
            paragraphs.extend(current.take());
            current = Some(line.to_string());
        } else if line.trim().is_empty() {
            paragraphs.extend(current.take());
        } else if let Some(p) = &mut current {
            p.push(' ');
            p.push_str(line);
        }
    }
    paragraphs.extend(current);
    assert!(
        paragraphs.len() > 15,
        "read the invariants: {}",
        paragraphs.len()
    );
    // Every function name in the workspace's Rust source.
    let mut fns = BTreeSet::new();
    for dir in ["exporter", "truthscale-core", "tests"] {
        let mut paths = Vec::new();
        rust_files(&workspace().join(dir), &mut paths);
        for p in paths {
            let text = std::fs::read_to_string(&p).expect("read");
            for (_, rest) in text.match_indices("fn ").map(|(i, _)| text.split_at(i + 3)) {
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                fns.insert(name);
            }
        }
    }
    for p in paragraphs {
        let held_by = &p[p
            .rfind("(`")
            .or_else(|| p.rfind("(clippy"))
            .unwrap_or_else(|| {
                panic!("an invariant that does not end by naming what holds it: {p}")
            })..];
        let mut named = 0;
        for (i, token) in held_by.split('`').enumerate() {
            let is_test_path = i % 2 == 1
                && token.contains("::")
                && token
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == ':');
            if is_test_path {
                let name = token.rsplit("::").next().unwrap_or_default();
                assert!(
                    fns.contains(name),
                    "ARCHITECTURE.md names `{token}`, which is no test: {p}"
                );
                named += 1;
            }
        }
        assert!(
            named > 0 || held_by.contains("clippy") || held_by.contains("the compiler"),
            "an invariant that names no test or lint: {p}"
        );
    }
}

/// Every production file of both crates: `exporter/src` and `truthscale-core/src`.
fn production_files() -> Vec<(String, String)> {
    let mut files = crate_files("exporter/src");
    files.extend(crate_files("truthscale-core/src"));
    files
}

/// The printing macros in the non-test code of `path`, outside `stdout` (whose `say!` is
/// the one way to standard error): to a closed pipe they panic, and a panic ends the
/// process.
fn print_violations(path: &str, text: &str) -> Vec<String> {
    if path == "exporter/src/stdout.rs" {
        return Vec::new();
    }
    facts(path, text)
        .macros
        .into_iter()
        .filter(|m| matches!(m.as_str(), "println" | "print" | "eprintln" | "eprint"))
        .map(|m| {
            format!(
                "{path}: {m}! panics on a closed pipe: write standard output through stdout::lock, standard error through stdout::say!"
            )
        })
        .collect()
}

/// Architecture Invariant: outside tests, the exporter prints only through `stdout` (a
/// reader gone from standard output is noted, a failed write to standard error ignored):
/// no `println!` or `eprintln!`, which panic on a closed pipe.
#[test]
fn nothing_prints_but_through_stdout() {
    let v = all_violations(&crate_files("exporter/src"), print_violations);
    assert!(v.is_empty(), "{}", v.join("\n"));
}

#[test]
fn caught_a_print_to_a_closed_pipe() {
    for text in [
        "fn f() { eprintln!(\"x\"); }",
        "fn f() { println!(\"{}\", 1); }",
        "fn f() { std::eprint!(\"x\"); }",
    ] {
        assert!(
            !print_violations("exporter/src/view.rs", text).is_empty(),
            "{text}"
        );
    }
    let fine = "fn f() { crate::stdout::say!(\"x\"); }\n#[cfg(test)]\nmod tests { fn g() { eprintln!(\"y\"); } }";
    assert!(print_violations("exporter/src/view.rs", fine).is_empty());
}

/// Architecture Invariant: no production function is over 80 lines.
#[test]
fn no_function_over_80_lines() {
    let files = production_files();
    let fns: Vec<(String, usize)> = files
        .iter()
        .flat_map(|(p, t)| production_fn_lengths(p, t))
        .collect();
    assert!(fns.len() > 200, "read the functions: {}", fns.len());
    let v = length_violations(&fns);
    assert!(v.is_empty(), "{}", v.join("\n"));
}

/// Architecture Invariant: outside tests, no glob imports a module of the same crate.
#[test]
fn no_sibling_globs_outside_tests() {
    let v = all_violations(&production_files(), glob_violations);
    assert!(v.is_empty(), "{}", v.join("\n"));
}

/// Architecture Invariant: commands never name the core's fleet analysis or showback, and the
/// report's renderers read only its sections.
#[test]
fn commands_and_renderers_never_analyze() {
    let files = crate_files("exporter/src");
    for r in RENDERERS {
        assert!(files.iter().any(|(p, _)| p == r), "{r} exists");
    }
    let v = all_violations(&files, report_violations);
    assert!(v.is_empty(), "{}", v.join("\n"));
}

/// Architecture Invariant: the metric families are named in the catalog.
#[test]
fn metric_names_live_in_the_catalog() {
    let files = production_files();
    assert!(files.iter().any(|(p, _)| p == CATALOG));
    let catalog = read(CATALOG);
    assert!(
        string_literals(CATALOG, &catalog)
            .iter()
            .any(|s| !metric_names(s).is_empty()),
        "the catalog names the metric families"
    );
    let v = all_violations(&files, metric_literal_violations);
    assert!(v.is_empty(), "{}", v.join("\n"));
}

/// Architecture Invariant: only the publisher encodes the exposition.
#[test]
fn only_the_publisher_encodes() {
    let files = crate_files("exporter/src");
    let publisher = files
        .iter()
        .find(|(p, _)| p == PUBLISHER)
        .expect("the publisher");
    assert!(
        facts(&publisher.0, &publisher.1)
            .names
            .iter()
            .any(|n| n.path.join("::") == "truthscale_core::exposition::encode"),
        "the publisher encodes"
    );
    let v = all_violations(&files, encode_violations);
    assert!(v.is_empty(), "{}", v.join("\n"));
}

/// Architecture Invariant: sinks never sample.
#[test]
fn sinks_never_sample() {
    let files = crate_files("exporter/src");
    assert!(files.iter().any(|(p, _)| top_module(p) == "sinks"));
    let v = all_violations(&files, sink_violations);
    assert!(v.is_empty(), "{}", v.join("\n"));
}

/// Architecture Invariant: the pipeline is handed its source's label at start and has
/// nothing to compare: it never asks its source's name or kind and compares nothing to a
/// string.
#[test]
fn the_pipeline_never_asks_which_source_it_runs() {
    let files = crate_files("exporter/src");
    assert!(
        files
            .iter()
            .filter(|(p, _)| top_module(p) == "pipeline")
            .count()
            >= 3
    );
    let v = all_violations(&files, pipeline_violations);
    assert!(v.is_empty(), "{}", v.join("\n"));
}

#[test]
fn caught_the_pipeline_comparing_its_source_through_a_local() {
    let at = "exporter/src/pipeline/mod.rs";
    let edits = [
        "impl Pipeline { fn tick(&mut self) { let n = self.source.name(); if n == \"sim\" {} } }",
        "impl Pipeline { fn tick(&mut self) { let n = self.label.value(); if \"sim\" != n {} } }",
        "fn f(label: SourceLabel) -> bool { let v = label.to_string(); v.eq(\"sim\") }",
        "fn f(v: &str) -> bool { v.starts_with(\"dcgm\") }",
        "fn f(v: &str) -> u8 { match v { \"sim\" => 1, _ => 0 } }",
        "fn f(v: &str) -> bool { matches!(v, \"sim\" | \"replay\") }",
        "fn f(p: &Pipeline) -> &str { p.source.kind() }",
    ];
    for edit in edits {
        assert!(
            !pipeline_violations(at, edit).is_empty(),
            "not caught: {edit}"
        );
    }
    let fine = [
        "fn f(p: &Pipeline) -> String { p.label.to_string() }",
        "#[cfg(test)] mod tests { fn f(v: &str) -> bool { v == \"sim\" } }",
    ];
    for edit in fine {
        assert!(pipeline_violations(at, edit).is_empty(), "flagged: {edit}");
    }
    let elsewhere = "fn f(v: &str) -> bool { v == \"sim\" }";
    assert!(pipeline_violations("exporter/src/view.rs", elsewhere).is_empty());
}

/// Architecture Invariant: `sources/` is checked file by file: nothing outside `sources/` and
/// the commands reaches inside one source's module, and no source reaches inside another's.
#[test]
fn only_a_source_reaches_inside_its_folder() {
    let files = crate_files("exporter/src");
    let modules = source_modules(&files);
    assert!(
        modules.contains("nvml") && modules.contains("sim"),
        "{modules:?}"
    );
    let v = all_violations(&files, |p, t| source_file_violations(p, t, &modules));
    assert!(v.is_empty(), "{}", v.join("\n"));
}

/// Moving the cgroup reader (which attribution shares with NVML) back under `sources/nvml/`.
#[test]
fn caught_a_helper_moved_under_a_source() {
    let modules: BTreeSet<String> = ["nvml", "sim"].map(String::from).into();
    let rule = |p: &str, t: &str| source_file_violations(p, t, &modules);
    let caught = [
        (
            "exporter/src/attribution/mod.rs",
            "use crate::sources::nvml::cgroup::pod_of_pid;\nfn f() { pod_of_pid(1); }",
        ),
        (
            "exporter/src/attribution/kubelet.rs",
            "fn f() { crate::sources::nvml::pod_of_pid(1); }",
        ),
        (
            "exporter/src/sources/sim.rs",
            "use super::nvml::cgroup;\nfn f() { cgroup::pod_of_pid(1); }",
        ),
    ];
    for (at, edit) in caught {
        assert!(!rule(at, edit).is_empty(), "not caught in {at}: {edit}");
    }
    let fine = [
        (
            "exporter/src/sources/nvml/mod.rs",
            "mod cgroup;\nfn f() { cgroup::pod_of_pid(1); }",
        ),
        (
            "exporter/src/commands/doctor.rs",
            "fn f() { crate::sources::nvml::open(); }",
        ),
        ("exporter/src/compose.rs", "use crate::sources::Source;"),
    ];
    for (at, edit) in fine {
        assert!(rule(at, edit).is_empty(), "flagged in {at}: {edit}");
    }
}

/// Architecture Invariant: no production file on the report's path is over 700 lines.
#[test]
fn report_path_files_stay_short() {
    let files = production_files();
    for p in REPORT_PATH {
        assert!(files.iter().any(|(f, _)| f.starts_with(p)), "{p} exists");
    }
    let v = all_violations(&files, file_length_violations);
    assert!(v.is_empty(), "{}", v.join("\n"));
}

#[test]
fn caught_a_long_file_on_the_report_path() {
    let long = "fn f() {}\n".repeat(MAX_FILE_LINES + 1);
    assert!(!file_length_violations("exporter/src/history/read.rs", &long).is_empty());
    assert!(!file_length_violations("truthscale-core/src/fleet/packing.rs", &long).is_empty());
    let at_most = "fn f() {}\n".repeat(MAX_FILE_LINES);
    assert!(file_length_violations("exporter/src/history/read.rs", &at_most).is_empty());
    assert!(file_length_violations("exporter/src/view.rs", &long).is_empty());
}

#[test]
fn caught_a_long_function() {
    let body = |n: usize| -> String {
        (0..n.saturating_sub(2))
            .map(|i| format!("    let _x{i} = {i};\n"))
            .collect()
    };
    let long = format!(
        "impl S {{\n    fn short(&self) {{}}\n}}\nmod m {{\n    pub fn long() {{\n{}}}\n}}\n\
         #[cfg(test)]\nmod tests {{\n    fn long_test() {{\n{}}}\n}}\n",
        body(81),
        body(200)
    );
    let fns = production_fn_lengths("exporter/src/view.rs", &long);
    assert_eq!(
        fns,
        vec![
            ("exporter::view::S::short".to_string(), 1),
            ("exporter::view::m::long".to_string(), 81),
        ]
    );
    // 81 lines is one too many; 80 is allowed; a function is said once, at its longest.
    let v = length_violations(&fns);
    assert_eq!(v.len(), 1, "{v:?}");
    assert!(
        v[0].starts_with("exporter::view::m::long is 81 lines"),
        "{v:?}"
    );
    let at_most = [("exporter::view::m::long".to_string(), 80)];
    assert!(length_violations(&at_most).is_empty());
    let twice = [
        ("exporter::view::m::long".to_string(), 85),
        ("exporter::view::m::long".to_string(), 90),
    ];
    assert_eq!(
        length_violations(&twice),
        vec!["exporter::view::m::long is 90 lines: a function is at most 80 lines; split it"]
    );
    // Strings, characters, comments and macro_rules! bodies do not confuse the counter.
    let tricky = "fn a() {\n    let _ = \"}\\\"{\";\n    let _ = '}';\n    let _ = r#\"\n}\"#;\n    // }\n    /* } /* } */ */\n    let _: &'static str = b\"}\";\n}\nmacro_rules! m { () => { fn b() {} } }\nfn c<'a>(x: &'a [u8; 2]) -> [u8; 2] { *x }\n";
    assert_eq!(
        fn_lengths(tricky),
        vec![("a".to_string(), 9), ("c".to_string(), 1)]
    );
}

#[test]
fn caught_a_sibling_glob() {
    for text in [
        "use super::*;",
        "mod inner { pub fn f() {} } use inner::*;",
        "use crate::report::{format::*};",
        "use std::collections::*;",
    ] {
        assert!(
            !glob_violations("exporter/src/view.rs", text).is_empty(),
            "not caught: {text}"
        );
    }
    for text in [
        "#[cfg(test)] mod tests { use super::*; }",
        "use super::format::fmt_pct;",
    ] {
        assert!(
            glob_violations("exporter/src/view.rs", text).is_empty(),
            "{text}"
        );
    }
    assert!(glob_violations("exporter/src/report/html.rs", "use plotters::prelude::*;").is_empty());
}

#[test]
fn caught_a_command_analyzing_or_a_renderer_reading_history() {
    for text in [
        "use truthscale_core::fleet; fn f() { let _ = fleet::analyze(&i, &c); }",
        "fn f() { let _ = truthscale_core::showback::showback(); }",
        "use truthscale_core::showback::{self as s}; fn f(x: &s::Showback) {}",
    ] {
        assert!(
            !report_violations("exporter/src/commands/top.rs", text).is_empty(),
            "not caught: {text}"
        );
    }
    let allowed = "use truthscale_core::fleet::{FleetConfig, IDLE_BUSY_BELOW}; fn f() { let _ = FleetConfig::default(); }";
    assert!(report_violations("exporter/src/commands/report.rs", allowed).is_empty());
    for text in [
        "use truthscale_core::fleet::analyze;",
        "fn f() { let _ = truthscale_core::showback::showback(); }",
        "use crate::history::History;",
        "fn f() { let _ = super::super::history::decode_range_answer(b\"\"); }",
    ] {
        for r in RENDERERS {
            assert!(
                !report_violations(r, text).is_empty(),
                "not caught in {r}: {text}"
            );
        }
    }
    let reads =
        "use truthscale_core::fleet::{FleetReport, Summary}; use super::sections::SECTIONS;";
    assert!(report_violations("exporter/src/report/text.rs", reads).is_empty());
}

#[test]
fn caught_a_metric_name_literal() {
    for text in [
        "const NAME: &str = \"truthscale_gpu_up\";",
        "fn f() -> String { format!(\"{}\", \"truthscale_gpu_effective_compute_ratio\") }",
        "fn f(w: &mut String) { w.push_str(&format!(\"truthscale_gpu_info{{uuid=\\\"{}\\\"}}\", 1)); }",
        "fn f() -> bool { \"x\" == r\"truthscale_source_up\" }",
    ] {
        assert!(
            !metric_literal_violations("exporter/src/view.rs", text).is_empty(),
            "not caught: {text}"
        );
    }
    for text in [
        "/// `truthscale_gpu_up`\nfn f() {}",
        "#[cfg(test)] mod tests { const N: &str = \"truthscale_gpu_up\"; }",
        "const C: &str = \"truthscale_core\";",
    ] {
        assert!(
            metric_literal_violations("exporter/src/view.rs", text).is_empty(),
            "{text}"
        );
    }
    assert!(
        metric_literal_violations(CATALOG, "const N: &str = \"truthscale_gpu_up\";").is_empty()
    );
}

#[test]
fn caught_encoding_outside_the_publisher() {
    for (path, text) in [
        (
            "exporter/src/http/mod.rs",
            "use truthscale_core::exposition; fn f() { let _ = exposition::encode(a, b, c, d); }",
        ),
        (
            "exporter/src/sinks/otlp/mod.rs",
            "fn f() { let _ = truthscale_core::exposition::encode(a, b, c, d); }",
        ),
        (
            "exporter/src/view.rs",
            "use truthscale_core::exposition::*;",
        ),
    ] {
        assert!(
            !encode_violations(path, text).is_empty(),
            "not caught: {text}"
        );
    }
    let text = "use truthscale_core::exposition::{self, Encoding}; fn f() { exposition::encode(a, b, c, Encoding::Text); }";
    assert!(encode_violations(PUBLISHER, text).is_empty());
}

#[test]
fn caught_a_sink_sampling() {
    for text in [
        "use crate::sources::Source;",
        "fn f(s: &mut dyn Source) { let _ = s.sample(now); }",
        "use crate::{pipeline::Sampler};",
        "fn f() { let _ = super::super::super::compose::start(c); }",
    ] {
        assert!(
            !sink_violations("exporter/src/sinks/otlp/instruments.rs", text).is_empty(),
            "not caught: {text}"
        );
    }
    let text =
        "use crate::publish::Snapshot; #[cfg(test)] mod tests { fn t(s: &mut S) { s.sample(n); } }";
    assert!(sink_violations("exporter/src/sinks/otlp/mod.rs", text).is_empty());
}

// ---------------------------------------------------------------------------------------
// The public surface

/// Where the exporter's public surface is written down, one path per line.
const PUBLIC_API: &str = "exporter/public-api.txt";

/// Whether an item is `pub` without a restriction (`pub(crate)` is not).
fn is_pub(v: &syn::Visibility) -> bool {
    matches!(v, syn::Visibility::Public(_))
}

/// The public items of the module in `path` (and of its public modules, files followed),
/// as paths from the crate's root: `compose::start`, `pipeline::Sampler::latest`, `sources::*`
/// for a macro that writes items, `attribution::kubelet::proto::*` for generated code.
fn public_items(path: &Path, module: &str, items: &[Item], out: &mut BTreeSet<String>) {
    let at = |name: &dyn std::fmt::Display| {
        if module.is_empty() {
            name.to_string()
        } else {
            format!("{module}::{name}")
        }
    };
    for item in items {
        if is_hook(item_attrs(item)) {
            continue;
        }
        match item {
            Item::Mod(m) if is_pub(&m.vis) => {
                let name = at(&m.ident);
                if let Some((_, inner)) = &m.content {
                    let generated = inner.iter().any(|i| matches!(i, Item::Macro(_)));
                    if generated {
                        out.insert(format!("{name}::*"));
                    } else {
                        public_items(path, &name, inner, out);
                    }
                    continue;
                }
                let dir = if path.ends_with("mod.rs") || path.ends_with("lib.rs") {
                    path.parent().expect("a folder").to_path_buf()
                } else {
                    path.with_extension("")
                };
                let file = [
                    dir.join(format!("{}.rs", m.ident)),
                    dir.join(m.ident.to_string()).join("mod.rs"),
                ]
                .into_iter()
                .find(|p| p.exists())
                .unwrap_or_else(|| panic!("{}: no file for mod {}", path.display(), m.ident));
                let text = std::fs::read_to_string(&file).expect("readable");
                let parsed = parse(&file.display().to_string(), &text);
                public_items(&file, &name, &parsed.items, out);
            }
            Item::Fn(f) if is_pub(&f.vis) => {
                out.insert(at(&f.sig.ident));
            }
            Item::Struct(s) if is_pub(&s.vis) => {
                out.insert(at(&s.ident));
            }
            Item::Enum(e) if is_pub(&e.vis) => {
                out.insert(at(&e.ident));
            }
            Item::Trait(t) if is_pub(&t.vis) => {
                out.insert(at(&t.ident));
            }
            Item::Const(c) if is_pub(&c.vis) => {
                out.insert(at(&c.ident));
            }
            Item::Static(s) if is_pub(&s.vis) => {
                out.insert(at(&s.ident));
            }
            Item::Type(t) if is_pub(&t.vis) => {
                out.insert(at(&t.ident));
            }
            Item::Use(u) if is_pub(&u.vis) => {
                let mut leaves_out = Vec::new();
                self::leaves(&u.tree, &mut Vec::new(), false, &mut leaves_out);
                for l in leaves_out {
                    let name = l.binds.unwrap_or_else(|| l.raw.join("::"));
                    out.insert(at(&format!("{name} (use)")));
                }
            }
            Item::Macro(m) if m.mac.path.is_ident("sources") => {
                out.insert(at(&"* (sources!)"));
            }
            Item::Impl(i) if i.trait_.is_none() => {
                let syn::Type::Path(t) = &*i.self_ty else {
                    continue;
                };
                let Some(ty) = t.path.segments.last() else {
                    continue;
                };
                for ii in &i.items {
                    if let ImplItem::Fn(f) = ii
                        && is_pub(&f.vis)
                        && !is_hook(&f.attrs)
                    {
                        out.insert(at(&format!("{}::{}", ty.ident, f.sig.ident)));
                    }
                }
            }
            _ => {}
        }
    }
}

/// The exporter's public surface, one path per line.
fn public_api() -> String {
    let lib = workspace().join("exporter/src/lib.rs");
    let text = std::fs::read_to_string(&lib).expect("lib.rs");
    let mut out = BTreeSet::new();
    public_items(
        &lib,
        "",
        &parse("exporter/src/lib.rs", &text).items,
        &mut out,
    );
    let mut s = String::from(
        "# The public surface of truthscale-exporter: what a Rust service embeds (ARCHITECTURE.md,\n\
         # \"API boundary\"). Checked by architecture::the_public_surface_is_the_embedding_api;\n\
         # regenerate with UPDATE_GOLDEN=1 after a deliberate change, and record it in CHANGELOG.md.\n",
    );
    for p in out {
        s.push_str(&p);
        s.push('\n');
    }
    s
}

#[test]
fn the_public_surface_is_the_embedding_api() {
    let got = public_api();
    let path = workspace().join(PUBLIC_API);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, &got).expect("writable");
    }
    let want = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        got == want,
        "the exporter's public surface changed; if deliberately, run with UPDATE_GOLDEN=1 and record it in CHANGELOG.md:\n{}",
        got.lines()
            .filter(|l| !want.lines().any(|w| w == *l))
            .map(|l| format!("+ {l}"))
            .chain(
                want.lines()
                    .filter(|w| !got.lines().any(|l| l == *w))
                    .map(|l| format!("- {l}"))
            )
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[test]
fn caught_a_new_public_item() {
    let text = "pub mod x { pub fn f() {} pub(crate) fn g() {} fn h() {} pub struct S; impl S { pub fn m(&self) {} fn n(&self) {} } }";
    let mut out = BTreeSet::new();
    public_items(
        Path::new("lib.rs"),
        "",
        &parse("lib.rs", text).items,
        &mut out,
    );
    let got: Vec<_> = out.into_iter().collect();
    assert_eq!(got, ["x::S", "x::S::m", "x::f"]);
}

// ---------------------------------------------------------------------------------------
// The test runner's settings

/// The tests `.config/nextest.toml` names (`test(=module::name)`), each as (module, name).
fn nextest_named_tests(config: &str) -> Vec<(String, String)> {
    config
        .split("test(=")
        .skip(1)
        .filter_map(|rest| rest.split_once(')'))
        .map(|(path, _)| match path.rsplit_once("::") {
            Some((module, name)) => (module.to_owned(), name.to_owned()),
            None => (String::new(), path.to_owned()),
        })
        .collect()
}

/// Every test `.config/nextest.toml` starts first is a test of that name in a file of that
/// module: a renamed test would lose its place in the queue without a word.
#[test]
fn the_tests_the_runner_starts_first_exist() {
    let named = nextest_named_tests(&read(".config/nextest.toml"));
    assert!(named.len() >= 10, "{named:?}");
    let mut files = Vec::new();
    for dir in [
        "tests/tests",
        "truthscale-core/tests",
        "exporter/tests",
        "exporter/src",
    ] {
        rust_files(&workspace().join(dir), &mut files);
    }
    let missing: Vec<String> = named
        .iter()
        .filter(|(module, name)| {
            !files.iter().any(|f| {
                let stem = f.file_stem().and_then(|s| s.to_str()).unwrap_or_default();
                (module.is_empty() || stem == module.rsplit("::").next().unwrap_or(module))
                    && std::fs::read_to_string(f).is_ok_and(|t| t.contains(&format!("fn {name}(")))
            })
        })
        .map(|(module, name)| format!("{module}::{name}"))
        .collect();
    assert!(
        missing.is_empty(),
        ".config/nextest.toml names tests that are not there: {missing:?}"
    );
}

#[test]
fn caught_a_renamed_test_in_the_runners_settings() {
    let config = "filter = \"\"\"\ntest(=serve::prometheus_round_trip)\n| test(=derive_props::no_configuration_panics)\n\"\"\"";
    assert_eq!(
        nextest_named_tests(config),
        [
            ("serve".to_owned(), "prometheus_round_trip".to_owned()),
            (
                "derive_props".to_owned(),
                "no_configuration_panics".to_owned()
            ),
        ]
    );
}

/// What the top level may hold: the layout's folders and files, the repository's own
/// settings, and the build's `target/`.
const TOP_LEVEL: &[&str] = &[
    ".ci",
    ".config",
    ".dockerignore",
    ".git",
    ".gitignore",
    "ARCHITECTURE.md",
    "CHANGELOG.md",
    "Cargo.lock",
    "Cargo.toml",
    "README.md",
    "alerts",
    "clippy.toml",
    "dashboards",
    "docker",
    "docs",
    "exporter",
    "fuzz",
    "scripts",
    "target",
    "tests",
    "truthscale-core",
];

fn top_level_strays(names: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut strays: Vec<String> = names
        .into_iter()
        .filter(|n| !TOP_LEVEL.contains(&n.as_str()))
        .collect();
    strays.sort();
    strays
}

#[test]
fn the_top_level_holds_only_the_layout() {
    let names = std::fs::read_dir(workspace())
        .expect("the workspace is readable")
        .map(|e| {
            e.expect("a top-level entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        });
    let strays = top_level_strays(names);
    assert!(
        strays.is_empty(),
        "the top level holds only the layout (ARCHITECTURE.md); move or remove {strays:?}"
    );
}

#[test]
fn caught_a_stray_file_at_the_top_level() {
    let names = ["README.md", "f.csv", "exporter", "notes"].map(str::to_owned);
    assert_eq!(top_level_strays(names), ["f.csv", "notes"]);
}
