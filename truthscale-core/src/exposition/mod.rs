//! Prometheus exposition: text format 0.0.4 and OpenMetrics 1.0, from one snapshot.
//!
//! Pure and deterministic: families in catalog order, entities in the order given, labels
//! in a fixed order, label values escaped. Non-finite values are never written.

mod values;

use crate::catalog::{self, Kind, MetricDesc};
use crate::tracker::EntityWindow;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use values::family_values;

/// Which text format to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// Prometheus text format 0.0.4.
    Text,
    /// OpenMetrics 1.0.0 text.
    OpenMetrics,
}

impl Encoding {
    /// The HTTP `Content-Type` of this format.
    #[must_use]
    pub fn content_type(self) -> &'static str {
        match self {
            Encoding::Text => "text/plain; version=0.0.4; charset=utf-8",
            Encoding::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
        }
    }
}

/// The pod the exporter runs beside (from the Downward API or configuration).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Identity {
    /// Pod name.
    pub pod: Option<String>,
    /// Namespace.
    pub namespace: Option<String>,
    /// Container the GPU belongs to.
    pub container: Option<String>,
    /// Node name.
    pub node: Option<String>,
}

/// One GPU entity to expose.
#[derive(Debug, Clone)]
pub struct GpuEntry {
    /// The derived window and integrals.
    pub window: EntityWindow,
    /// Where its counters came from: the source's label (`nvml`, `dcgm_exporter`, `replay`,
    /// …; see [`crate::model::SourceKind`] for the built-in ones). Simulated entities say `sim` whatever
    /// source replayed them.
    pub source: &'static str,
    /// Whether it produced data within the stale period. A GPU that stopped is written only
    /// as `truthscale_gpu_up 0`.
    pub up: bool,
    /// The most processes, and the most holders, whose own series are written for this GPU
    /// (the series cap's first cut, counted by the exporter); `None`: all of them. The
    /// device's own series, its holder count and its per-pod parts are always of all of them.
    pub list_cap: Option<usize>,
}

/// One source's health.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SourceHealth {
    /// Source label value.
    pub name: String,
    /// Whether it produced a sample within the stale period.
    pub up: bool,
    /// Errors by kind.
    pub errors: BTreeMap<String, u64>,
}

/// One push sink's health (e.g. OTLP).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SinkHealth {
    /// Sink label value (`otlp`).
    pub name: String,
    /// Failed pushes by kind.
    pub errors: BTreeMap<String, u64>,
}

/// The exporter's own state, exposed beside the GPU series.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ExporterStatus {
    /// Version string.
    pub version: String,
    /// Sources.
    pub sources: Vec<SourceHealth>,
    /// Duration of the last tick in seconds.
    pub sample_duration_seconds: Option<f64>,
    /// Diagnostics by kind.
    pub diagnostics: BTreeMap<String, u64>,
    /// Unix time of this snapshot in seconds.
    pub snapshot_unix_seconds: f64,
    /// Size of the previous body.
    pub previous_body_bytes: Option<usize>,
    /// Push sinks (empty when none is configured).
    pub sinks: Vec<SinkHealth>,
    /// GPU series left out by the series cap so far.
    pub series_dropped: u64,
}

/// Escape a label value for both text formats, one-to-one: two different values are never
/// written the same, and [`unescape_label`] reads back the value.
///
/// The formats have escapes for backslash, double quote and newline only. Characters that
/// must not be written raw are written as visible text instead: a backslash (itself escaped
/// by the format) then `r`, `t` or `0` for CR, TAB and NUL, `xHH` for the other ASCII
/// controls, and `u{HHHH}` for the bidirectional controls (U+061C, U+200E, U+200F,
/// U+202A–U+202E, U+2066–U+2069), which would otherwise reorder what a reader sees. So that
/// this cannot collide with a value holding the same text, a backslash that a reader could
/// take for the start of such an escape (one followed by `r`, `t`, `0`, `x`, `u`, or a
/// character written as an escape) is itself written as one, `x5c`; every other backslash is
/// written as it is. Every reader (Prometheus, promtool, the Python parser, a line reader
/// that takes CR for a line end) reads the same characters: `\r` for a CR, `\x5cr` for a
/// backslash then `r`, `\\` for two backslashes.
#[must_use]
pub fn escape_label(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    escape_label_into(&mut out, v);
    out
}

/// [`escape_label`], appended to `out`. A value of printable ASCII without a backslash or a
/// double quote (nearly every one) is copied as it is.
pub fn escape_label_into(out: &mut String, v: &str) {
    if v.bytes()
        .all(|b| (0x20..0x7f).contains(&b) && b != b'\\' && b != b'"')
    {
        out.push_str(v);
        return;
    }
    let mut chars = v.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if backslash_escaped(chars.peek().copied()) => out.push_str(r"\\x5c"),
            '\\' => out.push_str(r"\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str(r"\\r"),
            '\t' => out.push_str(r"\\t"),
            '\0' => out.push_str(r"\\0"),
            c if c.is_ascii_control() => {
                let _ = write!(out, r"\\x{:02x}", u32::from(c));
            }
            c if is_bidi_control(c) => {
                let _ = write!(out, r"\\u{{{:04x}}}", u32::from(c));
            }
            c => out.push(c),
        }
    }
}

/// The bidirectional-control characters, never written raw.
fn is_bidi_control(c: char) -> bool {
    matches!(
        c,
        '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'
    )
}

/// Whether a backslash before `next` is written as the visible escape `x5c`, so that it
/// cannot be read as the start of one.
fn backslash_escaped(next: Option<char>) -> bool {
    next.is_some_and(|n| {
        matches!(n, 'r' | 't' | '0' | 'x' | 'u')
            || (n.is_ascii_control() && n != '\n')
            || is_bidi_control(n)
    })
}

/// Read back a label value written by [`escape_label`] (the text between the quotes): the
/// format's three escapes, then truthscale's visible ones. `None` for text that
/// [`escape_label`] cannot have written (a lone or unknown format escape, a bad `xHH` or
/// `u{…}`).
#[must_use]
pub fn unescape_label(text: &str) -> Option<String> {
    let mut read = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '"' || c == '\n' {
            return None;
        }
        if c != '\\' {
            read.push(c);
            continue;
        }
        read.push(match chars.next()? {
            '\\' => '\\',
            '"' => '"',
            'n' => '\n',
            _ => return None,
        });
    }
    unescape_visible(&read)
}

/// Undo the visible escapes of [`escape_label`] in a value the format's reader has read.
fn unescape_visible(read: &str) -> Option<String> {
    let mut out = String::with_capacity(read.len());
    let mut rest = read;
    while let Some(at) = rest.find('\\') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        let (c, used) = match after.chars().next() {
            Some('r') => ('\r', 1),
            Some('t') => ('\t', 1),
            Some('0') => ('\0', 1),
            Some('x') => {
                let hex = after
                    .get(1..3)
                    .filter(|h| h.bytes().all(|b| b.is_ascii_hexdigit()))?;
                let c = char::from(u8::from_str_radix(hex, 16).ok()?);
                ((c.is_ascii_control() || c == '\\').then_some(c)?, 3)
            }
            Some('u') => {
                let close = after.find('}')?;
                let hex = after.get(1..close)?.strip_prefix('{')?;
                if hex.is_empty() || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                    return None;
                }
                let c = char::from_u32(u32::from_str_radix(hex, 16).ok()?)?;
                (is_bidi_control(c).then_some(c)?, close + 1)
            }
            _ => ('\\', 0),
        };
        out.push(c);
        rest = &after[used..];
    }
    out.push_str(rest);
    Some(out)
}

fn gpu_labels(e: &GpuEntry, id: &Identity) -> String {
    let pairs = gpu_label_pairs(e, id);
    let mut s = String::new();
    for (i, (k, v)) in pairs.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        label_into(&mut s, k, v);
    }
    s
}

/// `k="v"`, the value escaped, appended to `out`.
fn label_into(out: &mut String, k: &str, v: &str) {
    out.push_str(k);
    out.push_str("=\"");
    escape_label_into(out, v);
    out.push('"');
}

/// The labels of a GPU entity, in exposition order (identity over attribution, empty
/// values left out).
#[must_use]
pub fn gpu_label_pairs(e: &GpuEntry, id: &Identity) -> Vec<(&'static str, String)> {
    let w = &e.window.id;
    let mut pairs: Vec<(&str, String)> = Vec::with_capacity(9);
    if let Some(g) = w.gpu {
        pairs.push(("gpu", g.to_string()));
    }
    if let Some(u) = &w.uuid {
        pairs.push(("uuid", u.clone()));
    }
    if let Some(m) = &w.model {
        pairs.push(("model", m.clone()));
    }
    if let Some(m) = &w.mig {
        pairs.push(("mig_instance", m.gpu_instance.to_string()));
        if let Some(p) = &m.profile {
            pairs.push(("mig_profile", p.clone()));
        }
    }
    // Attribution from one identity: an entity the source attributed to a pod takes pod,
    // namespace and container all from that attribution; only an entity the source did not
    // attribute takes the exporter's own Downward API identity. Likewise the node.
    let (pod, namespace, container) = match w.pod.as_ref().filter(|p| !p.pod.is_empty()) {
        Some(p) => (Some(&p.pod), p.namespace.as_ref(), p.container.as_ref()),
        None => (
            id.pod.as_ref(),
            id.namespace.as_ref(),
            id.container.as_ref(),
        ),
    };
    let node = w
        .node
        .as_ref()
        .filter(|n| !n.is_empty())
        .or(id.node.as_ref());
    for (k, v) in [
        ("pod", pod),
        ("namespace", namespace),
        ("container", container),
        ("node", node),
    ] {
        if let Some(v) = v.filter(|v| !v.is_empty()) {
            pairs.push((k, v.clone()));
        }
    }
    pairs
}

struct Writer<'a> {
    out: &'a mut String,
    format: Encoding,
}

/// A family's help text as `format` escapes it: a double quote in OpenMetrics, whose
/// grammar allows none bare in a `# HELP` (both formats escape a backslash and a line break,
/// which no catalog help holds: `catalog`'s tests hold it).
fn write_help(out: &mut String, help: &str, format: Encoding) {
    if format == Encoding::OpenMetrics && help.contains('"') {
        let mut parts = help.split('"');
        out.push_str(parts.next().unwrap_or_default());
        for part in parts {
            out.push_str("\\\"");
            out.push_str(part);
        }
    } else {
        out.push_str(help);
    }
}

impl Writer<'_> {
    fn header(&mut self, m: &MetricDesc) {
        // OpenMetrics names the family without the sample suffix: `# TYPE x counter` for
        // `x_total`, `# TYPE x info` for `x_info`.
        let family = match (self.format, m.kind) {
            (Encoding::OpenMetrics, Kind::Counter) => m.name.trim_end_matches("_total"),
            (Encoding::OpenMetrics, Kind::Gauge) if m.name.ends_with("_info") => {
                m.name.trim_end_matches("_info")
            }
            _ => m.name,
        };
        let kind = match (self.format, m.kind, m.name) {
            (Encoding::OpenMetrics, Kind::Gauge, n) if n.ends_with("_info") => "info",
            (_, k, _) => k.as_str(),
        };
        let _ = write!(self.out, "# HELP {family} ");
        write_help(self.out, m.help, self.format);
        let _ = writeln!(self.out, "\n# TYPE {family} {kind}");
    }

    fn sample(&mut self, m: &MetricDesc, labels: &str, extra: &[(&str, &str)], v: f64) {
        if !v.is_finite() {
            return;
        }
        self.out.push_str(m.name);
        let mut first = labels.is_empty();
        if !labels.is_empty() || !extra.is_empty() {
            self.out.push('{');
            self.out.push_str(labels);
            for (k, val) in extra {
                if !first {
                    self.out.push(',');
                }
                first = false;
                label_into(self.out, k, val);
            }
            self.out.push('}');
        }
        let _ = writeln!(self.out, " {v}");
    }
}

/// Labels beyond the entity's own, as (name, value) pairs.
pub(super) type ExtraLabels<'a> = Vec<(&'static str, &'a str)>;

/// Write the whole exposition.
#[must_use]
pub fn encode(
    gpus: &[GpuEntry],
    identity: &Identity,
    status: &ExporterStatus,
    format: Encoding,
) -> String {
    let mut out = String::with_capacity(4096 + gpus.len() * 4096);
    let labels: Vec<String> = gpus.iter().map(|g| gpu_labels(g, identity)).collect();
    let mut w = Writer {
        out: &mut out,
        format,
    };
    for m in catalog::ALL {
        // A family without a value has no header either.
        let mut headed = false;
        family_values(m, gpus, status, |i, extra, v| {
            if !headed {
                w.header(m);
                headed = true;
            }
            let l = i.and_then(|i| labels.get(i)).map_or("", String::as_str);
            w.sample(m, l, &extra, v);
        });
    }
    if format == Encoding::OpenMetrics {
        out.push_str("# EOF\n");
    }
    out
}

/// Every value [`encode`] writes, in the same order, as (family, labels, value): the
/// entity's labels ([`gpu_label_pairs`]) followed by the family's extra labels. Non-finite
/// values are skipped, as in the text. Other encoders (OTLP) use this, so their values
/// are the ones `/metrics` shows for the same snapshot.
pub fn for_each_value(
    gpus: &[GpuEntry],
    identity: &Identity,
    status: &ExporterStatus,
    mut f: impl FnMut(&'static MetricDesc, &[(&'static str, &str)], f64),
) {
    let labels: Vec<Vec<(&'static str, String)>> =
        gpus.iter().map(|g| gpu_label_pairs(g, identity)).collect();
    let mut all: Vec<(&'static str, &str)> = Vec::with_capacity(16);
    for m in catalog::ALL {
        family_values(m, gpus, status, |i, extra, v| {
            if !v.is_finite() {
                return;
            }
            all.clear();
            if let Some(own) = i.and_then(|i| labels.get(i)) {
                all.extend(own.iter().map(|(k, v)| (*k, v.as_str())));
            }
            all.extend(extra.iter().copied());
            debug_assert_eq!(
                m.check_labels(&all.iter().map(|(k, _)| *k).collect::<Vec<_>>()),
                Ok(())
            );
            f(m, &all, v);
        });
    }
}

/// Every value the catalog derives for `gpus` and `status`, before the encoders' last check
/// for finite values, as (family, value). The derivations give no NaN or infinity (each
/// makes such a value absent where it is computed, and says so); the encoders still skip one,
/// so that a defect never writes `NaN` or `+Inf` under a measured name. Checks hold the
/// derivations to that through this: a value skipped there would be one dropped unseen.
pub fn for_each_derived_value(
    gpus: &[GpuEntry],
    status: &ExporterStatus,
    mut f: impl FnMut(&'static MetricDesc, f64),
) {
    for m in catalog::ALL {
        family_values(m, gpus, status, |_, _, v| f(m, v));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::derive::DeriveConfig;
    use crate::model::{EntityId, EntitySample, PodRef, Readings, Sample, Throttles, Timestamp};
    use crate::model::{Field, SourceKind};
    use crate::tracker::Deriver;

    #[test]
    fn help_is_escaped_as_each_format_says() {
        let help = "Up (source=\"sim\"), \"quoted\"";
        let mut text = String::new();
        write_help(&mut text, help, Encoding::Text);
        assert_eq!(text, help);
        let mut om = String::new();
        write_help(&mut om, help, Encoding::OpenMetrics);
        assert_eq!(om, "Up (source=\\\"sim\\\"), \\\"quoted\\\"");
        let mut plain = String::new();
        write_help(&mut plain, "nothing to escape: é", Encoding::OpenMetrics);
        assert_eq!(plain, "nothing to escape: é");
    }

    /// The three escapes of the formats, and visible text for other control characters.
    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape_label("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
        assert_eq!(
            escape_label("p\ta\rb\0c\u{1b}d\u{7f}"),
            "p\\\\ta\\\\rb\\\\0c\\\\x1bd\\\\x7f"
        );
        assert_eq!(escape_label("日本\u{85}"), "日本\u{85}");
    }

    /// A value holding the text of a visible escape is written apart from the character
    /// that escape stands for; a backslash before anything else is written once, as before.
    #[test]
    fn label_escaping_is_one_to_one() {
        // A CR and a backslash then `r` were once written the same.
        assert_eq!(escape_label("\r"), r"\\r");
        assert_eq!(escape_label(r"\r"), r"\\x5cr");
        assert_eq!(escape_label("\\\r"), r"\\x5c\\r");
        assert_eq!(escape_label(r"\\r"), r"\\\\x5cr");
        assert_eq!(escape_label(r"C:\data\x"), r"C:\\data\\x5cx");
        assert_eq!(escape_label(r"\\srv\d"), r"\\\\srv\\d");
        assert_eq!(escape_label("a\\"), r"a\\");
        assert_eq!(escape_label("\u{202e}cba"), r"\\u{202e}cba");
        assert_eq!(escape_label(r"\u{202e}"), r"\\x5cu{202e}");
        assert_eq!(
            escape_label("\u{61c}\u{200e}\u{200f}\u{202a}\u{2066}\u{2069}"),
            r"\\u{061c}\\u{200e}\\u{200f}\\u{202a}\\u{2066}\\u{2069}"
        );
        assert_eq!(
            unescape_label(r"\\x5cu{202e}").as_deref(),
            Some(r"\u{202e}")
        );
        assert_eq!(unescape_label(r"\\u{202e}").as_deref(), Some("\u{202e}"));
        assert_eq!(
            unescape_label(r"\\r\\x1b\\\\").as_deref(),
            Some("\r\u{1b}\\\\")
        );
        assert_eq!(unescape_label(r"\q"), None);
        assert_eq!(unescape_label(r#"a"b"#), None);
        assert_eq!(unescape_label(r"\\x+1"), None);
        assert_eq!(unescape_label(r"\\u{41}"), None);
    }

    /// Awkward characters, the letters of the visible escapes, and anything else.
    fn awkward_value() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        let c = prop_oneof![
            prop::sample::select(vec![
                '\\', '"', '\n', '\r', '\t', '\0', '\u{1b}', '\u{7f}', 'r', 't', '0', 'x', 'u',
                '{', '}', '2', 'e', '\u{61c}', '\u{200e}', '\u{200f}', '\u{202a}', '\u{202e}',
                '\u{2066}', '\u{2069}', '\u{85}',
            ]),
            any::<char>(),
        ];
        proptest::collection::vec(c, 0..16).prop_map(|v| v.into_iter().collect())
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]
        /// Escaping reads back exactly, so two values are never written the same; no
        /// bidirectional or ASCII control is ever written raw.
        #[test]
        fn label_escaping_reads_back_and_hides_controls(a in awkward_value(), b in awkward_value()) {
            let (ea, eb) = (escape_label(&a), escape_label(&b));
            proptest::prop_assert_eq!(unescape_label(&ea), Some(a.clone()));
            proptest::prop_assert_eq!(ea == eb, a == b);
            proptest::prop_assert!(!ea.chars().any(|c| is_bidi_control(c) || c.is_ascii_control()), "{:?}", ea);
        }
    }

    fn entry(pod: &str) -> GpuEntry {
        let mut r = Readings::default();
        r.set_value(Field::ReportedUtil, 1.0);
        r.set_value(Field::SmActive, 0.5);
        r.set_value(Field::TensorActive, 0.25);
        r.set_value(Field::DramActive, 0.5);
        r.set_value(Field::SmClockMhz, 1830.0);
        let e = EntitySample {
            id: EntityId {
                gpu: Some(0),
                uuid: Some("GPU-1".into()),
                model: Some("NVIDIA H100 80GB HBM3".into()),
                pod: Some(PodRef {
                    pod: pod.into(),
                    namespace: Some("ns".into()),
                    container: None,
                }),
                ..EntityId::default()
            },
            readings: r,
            throttles: Some(Throttles {
                sw_power_cap: true,
                ..Throttles::default()
            }),
            ..EntitySample::default()
        };
        let mut d = Deriver::new(DeriveConfig::default(), Some(1.0));
        let w = d
            .observe(&Sample {
                taken: Timestamp(1000),
                entities: vec![e],
            })
            .windows
            .remove(0);
        GpuEntry {
            window: w,
            source: SourceKind::Sim.as_str(),
            up: true,
            list_cap: None,
        }
    }

    /// A GPU of a model the catalog lacks, one pod holding it: its energy before its first
    /// window at busy 0 (no floor: 2 s at 300 W) is exported as `part="unsplit"`, on the GPU
    /// and on the pod, beside the floor's part from then on (2 s at 60 W); never as active.
    #[test]
    fn energy_without_a_floor_is_exported_unsplit() {
        let holder = PodRef {
            pod: "solo".into(),
            namespace: Some("ns".into()),
            container: None,
        };
        let mut d = Deriver::new(DeriveConfig::default(), Some(1.0));
        let mut last = None;
        for (t, watts, busy) in [
            (1, 300.0, 0.9),
            (2, 300.0, 0.9),
            (3, 60.0, 0.0),
            (4, 60.0, 0.0),
        ] {
            let mut r = Readings::default();
            r.set_value(Field::PowerWatts, watts);
            r.set_value(Field::ReportedUtil, busy);
            let e = EntitySample {
                id: EntityId {
                    gpu: Some(0),
                    model: Some("NVIDIA Made-Up GPU".into()),
                    pod: Some(holder.clone()),
                    ..EntityId::default()
                },
                readings: r,
                allocation: Some(vec![crate::model::Holder {
                    pod: holder.clone(),
                    resource: "nvidia.com/gpu".into(),
                    replica: None,
                    labels: Vec::new(),
                    owner: None,
                }]),
                ..EntitySample::default()
            };
            last = d
                .observe(&Sample {
                    taken: Timestamp(t * 1000),
                    entities: vec![e],
                })
                .windows
                .pop();
        }
        let g = GpuEntry {
            window: last.unwrap(),
            source: SourceKind::Sim.as_str(),
            up: true,
            list_cap: None,
        };
        let mut got = BTreeMap::new();
        for_each_value(
            &[g],
            &Identity::default(),
            &ExporterStatus::default(),
            |m, l, v| {
                let part = l
                    .iter()
                    .find(|(k, _)| *k == "part")
                    .map(|(_, v)| (*v).to_owned());
                got.insert((m.name, part), v);
            },
        );
        let part = |name: &'static str, p: &str| got.get(&(name, Some(p.to_owned()))).copied();
        for name in [
            "truthscale_gpu_energy_part_joules_total",
            "truthscale_pod_energy_joules_total",
        ] {
            assert_eq!(part(name, "unsplit"), Some(600.0), "{name}");
            assert_eq!(part(name, "idle_floor"), Some(120.0), "{name}");
            assert_eq!(part(name, "active"), Some(0.0), "{name}");
        }
        // Nothing went unheld: no unsplit series there, a measured zero of each known part.
        assert_eq!(
            part("truthscale_gpu_unallocated_energy_joules_total", "unsplit"),
            None
        );
        assert_eq!(
            part("truthscale_gpu_unallocated_energy_joules_total", "active"),
            Some(0.0)
        );
    }

    /// An engine spread over two GPUs (tensor parallel): each GPU's tokens per
    /// effective-compute second and energy per output token take its half of the engine's
    /// tokens. 2 000 tokens/s over 2 GPUs at effective compute 0.5: 2 000; 400 W over 250
    /// output tokens/s: 1.6 J.
    #[test]
    fn per_token_figures_take_a_gpus_share_of_the_engine() {
        let mut g = entry("p");
        g.window.metrics.effective_compute = Some(0.5);
        g.window.metrics.power_watts = Some(crate::derive::Valued {
            value: 400.0,
            method: crate::derive::Method::Counter,
        });
        g.window.serving = Some(crate::model::ServingSnapshot {
            engine: Some("vllm".into()),
            prompt_tokens_per_sec: Some(1500.0),
            output_tokens_per_sec: Some(500.0),
            gpus: Some(2),
            ..crate::model::ServingSnapshot::default()
        });
        let mut got = BTreeMap::new();
        for_each_value(
            &[g],
            &Identity::default(),
            &ExporterStatus::default(),
            |m, _, v| {
                got.insert(m.name, v);
            },
        );
        assert_eq!(
            got.get("truthscale_serving_tokens_per_effective_compute_second"),
            Some(&2000.0)
        );
        assert_eq!(
            got.get("truthscale_serving_energy_per_output_token_joules"),
            Some(&1.6)
        );
    }

    #[test]
    fn a_stopped_gpu_is_only_up_zero() {
        let mut e = entry("p");
        e.up = false;
        let body = encode(
            &[e],
            &Identity::default(),
            &ExporterStatus::default(),
            Encoding::Text,
        );
        let gpu_lines: Vec<&str> = body
            .lines()
            .filter(|l| l.starts_with("truthscale_gpu_"))
            .collect();
        assert_eq!(
            gpu_lines,
            vec![
                r#"truthscale_gpu_up{gpu="0",uuid="GPU-1",model="NVIDIA H100 80GB HBM3",pod="p",namespace="ns"} 0"#
            ]
        );
        let body = encode(
            &[entry("p")],
            &Identity::default(),
            &ExporterStatus::default(),
            Encoding::Text,
        );
        assert!(body.contains(r#"truthscale_gpu_up{gpu="0",uuid="GPU-1",model="NVIDIA H100 80GB HBM3",pod="p",namespace="ns"} 1"#));
    }

    #[test]
    fn text_format_golden() {
        let status = ExporterStatus {
            version: "0.1.0".into(),
            sources: vec![SourceHealth {
                name: "sim".into(),
                up: true,
                errors: BTreeMap::new(),
            }],
            sample_duration_seconds: Some(0.001),
            diagnostics: BTreeMap::new(),
            snapshot_unix_seconds: 1.0,
            previous_body_bytes: None,
            series_dropped: 0,
            sinks: vec![SinkHealth {
                name: "otlp".into(),
                errors: BTreeMap::from([("unavailable".to_string(), 2)]),
            }],
        };
        let body = encode(&[entry("p")], &Identity::default(), &status, Encoding::Text);
        let expected_lines = [
            "# TYPE truthscale_gpu_info gauge",
            r#"truthscale_gpu_info{gpu="0",uuid="GPU-1",model="NVIDIA H100 80GB HBM3",pod="p",namespace="ns",source="sim",fidelity="profiling",catalog_model="h100-sxm",pci_bus_id="",driver_version=""} 1"#,
            r#"truthscale_gpu_effective_compute_ratio{gpu="0",uuid="GPU-1",model="NVIDIA H100 80GB HBM3",pod="p",namespace="ns"} 0.25"#,
            r#"truthscale_gpu_inflation_gap_ratio{gpu="0",uuid="GPU-1",model="NVIDIA H100 80GB HBM3",pod="p",namespace="ns"} 0.75"#,
            r#"truthscale_gpu_regime{gpu="0",uuid="GPU-1",model="NVIDIA H100 80GB HBM3",pod="p",namespace="ns",regime="memory_bound",method="counters"} 1"#,
            r#"truthscale_gpu_sm_clock_hertz{gpu="0",uuid="GPU-1",model="NVIDIA H100 80GB HBM3",pod="p",namespace="ns"} 1830000000"#,
            r#"truthscale_gpu_clock_event_active{gpu="0",uuid="GPU-1",model="NVIDIA H100 80GB HBM3",pod="p",namespace="ns",reason="sw_power_cap"} 1"#,
            "# TYPE truthscale_gpu_busy_seconds_total counter",
            r#"truthscale_source_up{source="sim"} 1"#,
            r#"truthscale_build_info{version="0.1.0"} 1"#,
            r#"truthscale_sink_errors_total{sink="otlp",kind="unavailable"} 2"#,
        ];
        for l in expected_lines {
            assert!(body.lines().any(|b| b == l), "missing {l}\n{body}");
        }
        assert!(!body.contains("# EOF"));
        // Families whose values are all absent are not written at all: no power, so no
        // energy counter; not LLM serving, so no serving phase names.
        assert!(!body.contains("truthscale_gpu_power_watts"));
        assert!(!body.contains("truthscale_gpu_energy_joules_total"));
        assert!(!body.contains("truthscale_gpu_phase"));
    }

    #[test]
    fn observed_ceilings_with_age_and_ratio() {
        use crate::model::ServingSnapshot;
        use crate::tracker::{Ceiling, Ceilings};
        let mut g = entry("p");
        // Without ceilings (a single window), none of the families is written.
        let body = encode(
            std::slice::from_ref(&g),
            &Identity::default(),
            &ExporterStatus::default(),
            Encoding::Text,
        );
        assert!(!body.contains("ceiling"), "{body}");
        g.window.ceilings = Ceilings {
            roofline_saturation: Some(Ceiling {
                value: 0.8,
                age_seconds: 120.0,
            }),
            output_tokens_per_second: Some(Ceiling {
                value: 1000.0,
                age_seconds: 30.0,
            }),
        };
        g.window.serving = Some(ServingSnapshot {
            output_tokens_per_sec: Some(250.0),
            ..Default::default()
        });
        let body = encode(
            &[g],
            &Identity::default(),
            &ExporterStatus::default(),
            Encoding::Text,
        );
        let l = r#"gpu="0",uuid="GPU-1",model="NVIDIA H100 80GB HBM3",pod="p",namespace="ns""#;
        // The window's roofline saturation is 0.5 (DRAM 0.5): 0.5 / 0.8 = 0.625.
        for want in [
            format!("truthscale_gpu_ceiling_roofline_saturation_ratio{{{l}}} 0.8"),
            format!("truthscale_gpu_ceiling_output_tokens_per_second{{{l}}} 1000"),
            format!(
                r#"truthscale_gpu_ceiling_age_seconds{{{l},quantity="roofline_saturation"}} 120"#
            ),
            format!(
                r#"truthscale_gpu_ceiling_age_seconds{{{l},quantity="output_tokens_per_second"}} 30"#
            ),
            format!(r#"truthscale_gpu_ceiling_ratio{{{l},quantity="roofline_saturation"}} 0.625"#),
            format!(
                r#"truthscale_gpu_ceiling_ratio{{{l},quantity="output_tokens_per_second"}} 0.25"#
            ),
        ] {
            assert!(body.lines().any(|b| b == want), "missing {want}\n{body}");
        }
        assert!(body.contains("lower bound on the true ceiling"));
    }

    #[test]
    fn for_each_value_is_what_encode_writes() {
        let status = ExporterStatus {
            sinks: vec![SinkHealth {
                name: "otlp".into(),
                errors: BTreeMap::from([("timeout".to_string(), 1)]),
            }],
            ..ExporterStatus::default()
        };
        let gpus = [entry("p")];
        let body = encode(&gpus, &Identity::default(), &status, Encoding::Text);
        let mut lines = body.lines().filter(|l| !l.starts_with('#'));
        for_each_value(&gpus, &Identity::default(), &status, |m, labels, v| {
            let l = lines.next().expect("as many lines as values");
            let pairs: Vec<String> = labels
                .iter()
                .map(|(k, v)| format!("{k}=\"{}\"", escape_label(v)))
                .collect();
            let want = if pairs.is_empty() {
                format!("{} {v}", m.name)
            } else {
                format!("{}{{{}}} {v}", m.name, pairs.join(","))
            };
            assert_eq!(l, want);
        });
        assert_eq!(lines.next(), None);
    }

    /// The families that are one reading are written from the catalog's description of
    /// them: the window's reading times the scale (MHz to Hz for the SM clock).
    #[test]
    fn pass_through_families_are_their_reading_times_the_scale() {
        use crate::catalog::{ALL, RawKind};
        let raws: Vec<_> = ALL
            .iter()
            .filter_map(|m| Some((m, m.raw.filter(|r| r.kind == RawKind::PassThrough)?)))
            .collect();
        assert!(raws.len() >= 12, "{}", raws.len());
        let mut g = entry("p");
        let reading = |i: usize| 0.01 * (i + 1) as f64;
        for (i, (_, r)) in raws.iter().enumerate() {
            g.window.readings.set_value(r.field, reading(i));
        }
        let mut written = BTreeMap::new();
        for_each_value(
            &[g],
            &Identity::default(),
            &ExporterStatus::default(),
            |m, _, v| {
                written.insert(m.name, v);
            },
        );
        for (i, (m, r)) in raws.iter().enumerate() {
            assert_eq!(
                written.get(m.name),
                Some(&(reading(i) * r.scale)),
                "{}",
                m.name
            );
        }
        assert_eq!(written["truthscale_gpu_sm_clock_hertz"], 0.01 * 11.0 * 1e6);
    }

    #[test]
    fn openmetrics_counters_and_eof() {
        let body = encode(
            &[entry("p")],
            &Identity::default(),
            &ExporterStatus::default(),
            Encoding::OpenMetrics,
        );
        assert!(body.contains("# TYPE truthscale_gpu_busy_seconds counter\n"));
        assert!(body.contains("\ntruthscale_gpu_busy_seconds_total{"));
        // An info family is named without `_info`; its samples keep the suffix.
        assert!(body.contains("# TYPE truthscale_gpu info\n"));
        assert!(body.contains("\ntruthscale_gpu_info{"));
        assert!(!body.contains("# TYPE truthscale_gpu_info "));
        assert!(body.ends_with("# EOF\n"));
    }

    #[test]
    fn hostile_label_values_are_escaped() {
        let body = encode(
            &[entry("a\"b\\c\nd")],
            &Identity {
                node: Some("n\"1".into()),
                ..Identity::default()
            },
            &ExporterStatus::default(),
            Encoding::Text,
        );
        assert!(body.contains(r#"pod="a\"b\\c\nd""#), "{body}");
        assert!(body.contains(r#"node="n\"1""#));
        // Every sample line still has exactly one value after the label set.
        for l in body.lines().filter(|l| !l.starts_with('#')) {
            assert!(
                l.rsplit_once(' ')
                    .is_some_and(|(_, v)| v.parse::<f64>().is_ok()),
                "{l}"
            );
        }
    }

    /// Node mode's allowlisted pod labels: on the allocation series only, after its own
    /// labels, escaped; a holder whose pod lacks a label has none (not an empty one).
    #[test]
    fn pod_labels_on_allocation_info_only_escaped_and_absent_when_missing() {
        use crate::model::Holder;
        let mut e = entry("p");
        e.window.id.pod = None;
        let holder = |pod: &str, labels: Vec<(&'static str, String)>| Holder {
            pod: PodRef {
                pod: pod.into(),
                namespace: Some("web".into()),
                container: Some("vllm".into()),
            },
            resource: "nvidia.com/gpu".into(),
            replica: Some("0".into()),
            labels,
            owner: None,
        };
        e.window.allocation = Some(vec![
            holder(
                "chat-a",
                vec![
                    ("label_app_kubernetes_io_name", "chat".into()),
                    ("label_team", "a\"b\\c\nd".into()),
                ],
            ),
            holder("chat-b", vec![("label_team", String::new())]),
        ]);
        let body = encode(
            &[e],
            &Identity::default(),
            &ExporterStatus::default(),
            Encoding::Text,
        );
        let allocation: Vec<&str> = body
            .lines()
            .filter(|l| l.starts_with("truthscale_gpu_allocation_info{"))
            .collect();
        assert_eq!(
            allocation,
            [
                r#"truthscale_gpu_allocation_info{gpu="0",uuid="GPU-1",model="NVIDIA H100 80GB HBM3",pod="chat-a",namespace="web",container="vllm",resource="nvidia.com/gpu",replica="0",label_app_kubernetes_io_name="chat",label_team="a\"b\\c\nd"} 1"#,
                r#"truthscale_gpu_allocation_info{gpu="0",uuid="GPU-1",model="NVIDIA H100 80GB HBM3",pod="chat-b",namespace="web",container="vllm",resource="nvidia.com/gpu",replica="0"} 1"#,
            ]
        );
        // No other family carries them.
        assert_eq!(body.matches("label_team=").count(), 1, "{body}");
    }

    #[test]
    fn attribution_comes_from_one_identity() {
        let id = Identity {
            pod: Some("sidecar-pod".into()),
            namespace: Some("sidecar-ns".into()),
            container: Some("kserve-container".into()),
            node: Some("sidecar-node".into()),
        };
        // The source attributed the GPU to pod p in ns (no container): all three labels come
        // from there, none from the sidecar's own identity.
        let body = encode(
            &[entry("p")],
            &id,
            &ExporterStatus::default(),
            Encoding::Text,
        );
        assert!(
            body.contains(
                r#"model="NVIDIA H100 80GB HBM3",pod="p",namespace="ns",node="sidecar-node"}"#
            ),
            "{body}"
        );
        assert!(!body.contains("sidecar-pod") && !body.contains("kserve-container"));
        // A GPU the source did not attribute takes the sidecar's identity, all of it.
        let mut e = entry("p");
        e.window.id.pod = None;
        let body = encode(&[e], &id, &ExporterStatus::default(), Encoding::Text);
        assert!(
            body.contains(r#"pod="sidecar-pod",namespace="sidecar-ns",container="kserve-container",node="sidecar-node"}"#),
            "{body}"
        );
        // The node the source names wins over the sidecar's.
        let mut e = entry("p");
        e.window.id.node = Some("n7".into());
        let body = encode(&[e], &id, &ExporterStatus::default(), Encoding::Text);
        assert!(body.contains(r#"namespace="ns",node="n7"}"#), "{body}");
    }

    #[test]
    fn integrals_only_for_measured_inputs_each_with_its_denominator() {
        use crate::model::MigId;
        // A MIG instance: tensor and DRAM counters, no busy flag, no power; its SM clock at
        // the datasheet's reference, so κ = 1.
        let mut r = Readings::default();
        r.set_value(Field::TensorActive, 0.4);
        r.set_value(Field::DramActive, 0.2);
        r.set_value(
            Field::SmClockMhz,
            crate::gpus::by_key("h100-sxm").unwrap().f_ref_mhz,
        );
        let mig = EntitySample {
            id: EntityId {
                gpu: Some(0),
                uuid: Some("GPU-1".into()),
                model: Some("NVIDIA H100 80GB HBM3".into()),
                mig: Some(MigId {
                    uuid: None,
                    gpu_instance: 1,
                    compute_instance: None,
                    profile: Some("3g.40gb".into()),
                }),
                ..EntityId::default()
            },
            readings: r,
            ..EntitySample::default()
        };
        let mut d = Deriver::new(DeriveConfig::default(), Some(1.0));
        // Multiplexed: the tensor counter is blank every other window.
        let mut last = None;
        for i in 1..=4 {
            let mut e = mig.clone();
            if i % 2 == 0 {
                e.readings
                    .set(Field::TensorActive, crate::model::Reading::Blank);
            }
            let w = d
                .observe(&Sample {
                    taken: Timestamp(i * 1000),
                    entities: vec![e],
                })
                .windows
                .remove(0);
            last = Some(w);
        }
        let g = GpuEntry {
            window: last.unwrap(),
            source: SourceKind::DcgmExporter.as_str(),
            up: true,
            list_cap: None,
        };
        let body = encode(
            &[g],
            &Identity::default(),
            &ExporterStatus::default(),
            Encoding::Text,
        );
        let value = |name: &str| {
            body.lines()
                .find(|l| l.starts_with(&format!("{name}{{")))
                .and_then(|l| l.rsplit_once(' '))
                .map(|(_, v)| v.parse::<f64>().unwrap())
        };
        assert_eq!(value("truthscale_gpu_observed_seconds_total"), Some(4.0));
        // ECF 0.4 in two of the four seconds: the exact mean is 0.8 / 2 = 0.4, not 0.8 / 4.
        assert_eq!(
            value("truthscale_gpu_effective_compute_observed_seconds_total"),
            Some(2.0)
        );
        let ecf = value("truthscale_gpu_effective_compute_seconds_total").unwrap();
        assert!((ecf - 0.8).abs() < 1e-12, "{ecf}");
        // No busy flag, no power: no counter at all, never a zero.
        for absent in [
            "truthscale_gpu_busy_seconds_total",
            "truthscale_gpu_busy_observed_seconds_total",
            "truthscale_gpu_energy_joules_total",
            "truthscale_gpu_energy_observed_seconds_total",
        ] {
            assert_eq!(value(absent), None, "{absent}\n{body}");
        }
        // The regime is counter-based and stays so in the blank windows.
        // ρ = 0.4 / 0.2 = 2 with τ = 0.4: compute-bound, in the two windows that had the
        // tensor counter. The last window had none, so it has no regime gauge at all.
        assert!(
            body.contains(r#"regime="compute_bound",method="counters"} 2"#),
            "{body}"
        );
        assert!(!body.contains("truthscale_gpu_regime{"), "{body}");
        assert!(!body.contains(r#"method="power_heuristic""#));
    }

    /// Provenance: every GPU's info series carries its capability tier (`fidelity`), every
    /// regime and phase series the method that decided it (`method`), and a bound or an
    /// estimate is a family of its own, never the measured one's name.
    #[test]
    fn every_gpu_carries_its_tier_and_every_regime_its_method() {
        use crate::catalog::{GpuMetric, MetricId, Scope};
        use std::collections::BTreeSet;
        for m in catalog::ALL.iter().filter(|m| m.scope == Scope::Gpu) {
            let regime = m.extra_labels.contains(&"regime") || m.extra_labels.contains(&"phase");
            assert!(!regime || m.extra_labels.contains(&"method"), "{}", m.name);
        }
        // A profiling GPU (tensor and DRAM counters), and one with only the busy flag, power
        // and the SM clock (the NVML tier), whose regime is the power heuristic's.
        let profiling = entry("p");
        let mut r = Readings::default();
        r.set_value(Field::ReportedUtil, 0.9);
        r.set_value(Field::PowerWatts, 380.0);
        r.set_value(Field::SmClockMhz, 1900.0);
        let e = EntitySample {
            id: EntityId {
                gpu: Some(1),
                uuid: Some("GPU-2".into()),
                model: Some("NVIDIA H100 80GB HBM3".into()),
                ..EntityId::default()
            },
            readings: r,
            ..EntitySample::default()
        };
        let mut d = Deriver::new(DeriveConfig::default(), Some(1.0));
        let mut last = None;
        for i in 1..=3 {
            let out = d.observe(&Sample {
                taken: Timestamp(i * 1000),
                entities: vec![e.clone()],
            });
            last = out.windows.into_iter().next();
        }
        let nvml = GpuEntry {
            window: last.expect("a window"),
            source: SourceKind::Nvml.as_str(),
            up: true,
            list_cap: None,
        };
        let mut tiers: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let mut methods: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        let mut families: BTreeMap<String, BTreeSet<MetricId>> = BTreeMap::new();
        let gpus = [profiling, nvml];
        for_each_value(
            &gpus,
            &Identity::default(),
            &ExporterStatus::default(),
            |m, labels, _| {
                if m.scope != Scope::Gpu {
                    return;
                }
                let get = |k: &str| labels.iter().find(|(n, _)| *n == k).map(|(_, v)| *v);
                let uuid = get("uuid").expect("a GPU series names its GPU").to_string();
                families.entry(uuid.clone()).or_default().insert(m.id);
                if m.id == MetricId::Gpu(GpuMetric::GpuInfo) {
                    let tier = get("fidelity").expect("the info series carries the tier");
                    tiers.entry(uuid.clone()).or_default().push(tier.into());
                }
                if m.extra_labels.contains(&"method")
                    && !matches!(
                        m.id,
                        MetricId::Gpu(
                            GpuMetric::PodEffectiveCompute | GpuMetric::PodEffectiveComputeEstimate
                        )
                    )
                {
                    let method = get("method").expect("a regime series carries its method");
                    methods.entry(uuid).or_default().insert(method.into());
                }
            },
        );
        assert_eq!(tiers["GPU-1"], ["profiling"]);
        assert_eq!(tiers["GPU-2"], ["nvml"]);
        assert_eq!(methods["GPU-1"], BTreeSet::from(["counters".to_string()]));
        assert_eq!(
            methods["GPU-2"],
            BTreeSet::from(["power_heuristic".to_string()])
        );
        // Measured effective compute for the one, its upper bound and the power estimate
        // for the other, each under its own name.
        let has = |uuid: &str, id: MetricId| families[uuid].contains(&id);
        assert!(has("GPU-1", MetricId::Gpu(GpuMetric::GpuEffectiveCompute)));
        assert!(!has(
            "GPU-1",
            MetricId::Gpu(GpuMetric::GpuEffectiveComputeUpperBound)
        ));
        assert!(!has("GPU-2", MetricId::Gpu(GpuMetric::GpuEffectiveCompute)));
        assert!(has(
            "GPU-2",
            MetricId::Gpu(GpuMetric::GpuEffectiveComputeUpperBound)
        ));
        assert!(has("GPU-2", MetricId::Gpu(GpuMetric::GpuPowerProxy)));
    }

    #[test]
    fn a_replayed_simulation_still_says_sim() {
        let mut e = entry("p");
        e.source = SourceKind::Replay.as_str();
        e.window.simulated = true;
        let body = encode(
            &[e],
            &Identity::default(),
            &ExporterStatus::default(),
            Encoding::Text,
        );
        assert!(body.contains(r#"source="sim""#), "{body}");
        let mut e = entry("p");
        e.source = SourceKind::Replay.as_str();
        let body = encode(
            &[e],
            &Identity::default(),
            &ExporterStatus::default(),
            Encoding::Text,
        );
        assert!(body.contains(r#"source="replay""#));
    }

    /// Issue 34: a pod spinning one block (SM busy 0.6, no tensor work) beside a pod doing
    /// GEMMs (SM busy 0.2, all the tensor work) on one time-sliced H100. The device's
    /// measured effective compute is all the GEMM pod's (truth: the spin pod's is 0); the
    /// SM-busy split (0.75 of it to the spin pod) is an estimate, written only under
    /// `truthscale_pod_effective_compute_estimate_ratio`, never under the measured
    /// `truthscale_pod_effective_compute_ratio`, which only a sole holder (a whole GPU or a
    /// MIG instance) has, at its device's value.
    #[test]
    fn a_shared_gpus_split_is_an_estimate_and_a_sole_holders_is_measured() {
        use crate::catalog::{GpuMetric, MetricId};
        use crate::model::{Holder, MigId, ProcessReading};
        let pod = |name: &str| PodRef {
            pod: name.into(),
            namespace: Some("ml".into()),
            container: Some("main".into()),
        };
        let holder = |name: &str| Holder {
            pod: pod(name),
            resource: "nvidia.com/gpu".into(),
            replica: None,
            labels: Vec::new(),
            owner: None,
        };
        let process = |pid: &str, name: &str, sm: f64| ProcessReading {
            pid: pid.into(),
            sm_busy: Some(sm),
            pod: Some(pod(name)),
            ..ProcessReading::default()
        };
        let (spin_sm, gemm_sm) = (0.6, 0.2);
        let mut shared = entry("p");
        shared.window.id.pod = None;
        shared.window.allocation = Some(vec![holder("spin"), holder("gemm")]);
        shared.window.processes =
            vec![process("1", "spin", spin_sm), process("2", "gemm", gemm_sm)];
        let device = shared.window.metrics.effective_compute.expect("measured");
        let mut sole = entry("train");
        sole.window.id.uuid = Some("GPU-2".into());
        sole.window.allocation = Some(vec![holder("train")]);
        let mut mig = entry("eval");
        mig.window.id.uuid = Some("GPU-3".into());
        mig.window.id.mig = Some(MigId {
            gpu_instance: 1,
            profile: Some("3g.40gb".into()),
            ..MigId::default()
        });
        mig.window.allocation = Some(vec![holder("eval")]);
        let mut measured = Vec::new();
        let mut estimate = Vec::new();
        for_each_value(
            &[shared, sole, mig],
            &Identity::default(),
            &ExporterStatus::default(),
            |m, labels, v| {
                let get = |k: &str| labels.iter().find(|(n, _)| *n == k).map(|(_, v)| *v);
                let key = (
                    get("uuid").unwrap_or("").to_string(),
                    get("pod").unwrap_or("").to_string(),
                );
                let method = get("method").unwrap_or("").to_string();
                match m.id {
                    MetricId::Gpu(GpuMetric::PodEffectiveCompute) => {
                        measured.push((key, method, v))
                    }
                    MetricId::Gpu(GpuMetric::PodEffectiveComputeEstimate) => {
                        estimate.push((key, method, v));
                    }
                    _ => {}
                }
            },
        );
        let k = |uuid: &str, pod: &str| (uuid.to_string(), pod.to_string());
        let s = "sm_busy_share".to_string();
        let total = spin_sm + gemm_sm;
        assert_eq!(
            estimate,
            [
                (k("GPU-1", "spin"), s.clone(), device * spin_sm / total),
                (k("GPU-1", "gemm"), s, device - device * spin_sm / total),
            ]
        );
        let sole_holder = "sole_holder".to_string();
        assert_eq!(
            measured,
            [
                (k("GPU-2", "train"), sole_holder.clone(), device),
                (k("GPU-3", "eval"), sole_holder, device),
            ],
            "the shared GPU's holders have no measured per-pod value"
        );
    }

    /// Node mode: each holder pod's own pressure, labelled with its pod and namespace on a
    /// shared GPU; on a GPU attributed to its one holder, only that pod's, without a second
    /// pod label (another pod's is left out); a share not measured is not written, a
    /// measured zero is.
    #[test]
    fn each_holder_pods_pressure_is_written_with_its_pod_once() {
        use crate::model::PodPressure;
        let pressure = |name: &str, throttled: Option<f64>, io: Option<f64>| PodPressure {
            pod: PodRef {
                pod: name.into(),
                namespace: Some("ml".into()),
                container: None,
            },
            cpu_throttled_ratio: throttled,
            cpu_limit_cores: throttled.map(|_| 2.0),
            io_waiting_ratio: io,
            ..PodPressure::default()
        };
        let mut shared = entry("p");
        shared.window.id.pod = None;
        shared.window.holder_pressure = vec![
            pressure("loader", Some(0.1), Some(0.5)),
            pressure("train", Some(0.7), None),
        ];
        let mut sole = entry("train");
        sole.window.id.uuid = Some("GPU-2".into());
        sole.window.id.pod = Some(PodRef {
            pod: "train".into(),
            namespace: Some("ml".into()),
            container: Some("main".into()),
        });
        sole.window.holder_pressure = vec![
            pressure("other", Some(0.9), None),
            pressure("train", Some(0.7), Some(0.0)),
        ];
        let body = encode(
            &[shared, sole],
            &Identity::default(),
            &ExporterStatus::default(),
            Encoding::Text,
        );
        let lines = |family: &str| -> Vec<&str> {
            let start = format!("{family}{{");
            body.lines().filter(|l| l.starts_with(&start)).collect()
        };
        let gpu1 = r#"gpu="0",uuid="GPU-1",model="NVIDIA H100 80GB HBM3""#;
        let gpu2 = r#"gpu="0",uuid="GPU-2",model="NVIDIA H100 80GB HBM3",pod="train",namespace="ml",container="main""#;
        let want = |family: &str, values: [&str; 3]| -> Vec<String> {
            let [loader, train, sole] = values;
            [
                (format!(r#"{gpu1},pod="loader",namespace="ml""#), loader),
                (format!(r#"{gpu1},pod="train",namespace="ml""#), train),
                (gpu2.to_string(), sole),
            ]
            .into_iter()
            .filter(|(_, v)| !v.is_empty())
            .map(|(labels, v)| format!("{family}{{{labels}}} {v}"))
            .collect()
        };
        for (family, values) in [
            ("truthscale_pod_cpu_throttled_ratio", ["0.1", "0.7", "0.7"]),
            ("truthscale_pod_cpu_limit_cores", ["2", "2", "2"]),
            ("truthscale_pod_io_pressure_waiting_ratio", ["0.5", "", "0"]),
            ("truthscale_pod_cpu_pressure_waiting_ratio", ["", "", ""]),
            ("truthscale_pod_io_pressure_stalled_ratio", ["", "", ""]),
            ("truthscale_pod_memory_pressure_stalled_ratio", ["", "", ""]),
        ] {
            assert_eq!(lines(family), want(family, values), "{body}");
        }
        assert!(!body.contains("\"other\""), "{body}");
    }
}
