//! What DCGM's name generations leave to decide: the unit of a family whose name does not
//! prove it, and the families a reader saw and did not read.
//!
//! DCGM 4.6 renamed fields without changing their ids or units (`DCGM_FI_DEV_GPU_UTIL` is
//! `DCGM_FI_DEV_GPU_UTIL_RATIO`, still id 203 in percent), while dcgm-exporter 4.9 (DCGM
//! 4.7) emits GPU utilisation under that name as a 0..1 ratio. So the name alone does not
//! say the unit of such a family. It is decided, once per family and source, from:
//! 1. the `# HELP` text, where there is one (`%`, `percent` → percent; `ratio`, `0-1`,
//!    `0 to 1`, `fraction` → ratio);
//! 2. else the values: one above 1 is a percent; a fraction (not a whole number) at most 1
//!    is a ratio, since DCGM's percent fields are INT64 and cannot read 0.95;
//! 3. else (0 or 1 before anything decided it) the reading is ambiguous: refused and
//!    counted in [`Unread::ambiguous`], never scaled by a guess.
//!
//! A value at odds with the decision (a fraction for a percent family, above 1 for a ratio
//! one) is refused and counted the same way. A mean of raw samples ([`Units::set_means`])
//! is no raw reading: a fraction neither decides a ratio nor is at odds with a percent.

use std::collections::{BTreeMap, BTreeSet};

/// The most unread family names one reader keeps; the rest are counted.
pub const MAX_UNREAD_NAMES: usize = 256;

/// What a reader saw and did not read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Unread {
    /// DCGM families (lowercase metric names, or `dcgmi dmon` short names) seen and not read.
    pub families: BTreeSet<String>,
    /// Readings of further families past [`MAX_UNREAD_NAMES`], counted only.
    pub more: u64,
    /// Readings refused because their unit stayed ambiguous, by family.
    pub ambiguous: BTreeMap<String, u64>,
    /// Readings of a read family that were one of DCGM's blank sentinels (by the field's
    /// type), by family: blanks, never data.
    pub sentinels: BTreeMap<String, u64>,
    /// Readings of a read family that were not a finite number (`NaN`, `±Inf`), by family:
    /// blanks, never data.
    pub non_finite: BTreeMap<String, u64>,
    /// Readings the capture's tool printed as an error in place of a value (nvidia-smi's
    /// `[Unknown Error]`, `[GPU is lost]`), by family: blanks, never data.
    pub errors: BTreeMap<String, u64>,
    /// Readings of a read family that no GPU gives (a negative count, size or link value, a
    /// clock-event bitmask that is no whole number), by family: blanks, never data.
    pub impossible: BTreeMap<String, u64>,
    /// Readings of a read family on a series that names no GPU (no `gpu` or `UUID` label),
    /// by family: whose they are is unknown, so they are not read, never another GPU's.
    pub unnamed: BTreeMap<String, u64>,
    /// Readings of a read family that disagreed with another series' reading of the same
    /// field of the same GPU in one scrape (two exporters reading one GPU, say), by family:
    /// neither is known to be the GPU's, so the field is left blank.
    pub disagreeing: BTreeMap<String, u64>,
}

impl Unread {
    /// Note a family that is not read.
    pub fn family(&mut self, name: &str) {
        if self.families.contains(name) {
            return;
        }
        if self.families.len() < MAX_UNREAD_NAMES {
            self.families.insert(name.to_owned());
        } else {
            self.more += 1;
        }
    }

    /// Note `name`, a family found but not read, where it is a DCGM one (`DCGM_FI_*`,
    /// `DCGM_EXP_*`, dcgm-exporter 1.x's `dcgm_*`: the `dcgm_` prefix in any case), under its
    /// lower-case name; a family of another exporter is not DCGM's to name.
    pub fn dcgm_family(&mut self, name: &str) {
        let lower = name.to_ascii_lowercase();
        if lower.starts_with("dcgm_") {
            self.family(&lower);
        }
    }

    /// Note a reading of `family` refused for its unit.
    pub fn refuse(&mut self, family: &str) {
        add_one(&mut self.ambiguous, family);
    }

    /// Note a reading of `family` that no GPU gives.
    pub fn impossible(&mut self, family: &str) {
        add_one(&mut self.impossible, family);
    }

    /// Note a reading of `family` on a series that names no GPU.
    pub fn unnamed(&mut self, family: &str) {
        add_one(&mut self.unnamed, family);
    }

    /// Note a reading of `family` that disagreed with another series of the same GPU.
    pub fn disagreeing(&mut self, family: &str) {
        add_one(&mut self.disagreeing, family);
    }

    /// Note a reading of `family` that was one of DCGM's blank sentinels.
    pub fn sentinel(&mut self, family: &str) {
        add_one(&mut self.sentinels, family);
    }

    /// Note a reading of `family` that the capture's tool printed as an error.
    pub fn error(&mut self, family: &str) {
        add_one(&mut self.errors, family);
    }

    /// Note a reading `v` of `family` that was a blank: a sentinel, or not finite.
    pub fn blank(&mut self, family: &str, v: f64) {
        if v.is_finite() {
            self.sentinel(family);
        } else {
            add_one(&mut self.non_finite, family);
        }
    }

    /// Whether nothing was left unread.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.families.is_empty()
            && self.more == 0
            && self.ambiguous.is_empty()
            && self.sentinels.is_empty()
            && self.non_finite.is_empty()
            && self.errors.is_empty()
            && self.impossible.is_empty()
            && self.unnamed.is_empty()
            && self.disagreeing.is_empty()
    }

    /// How many families were seen and not read (at least: past the cap, lines).
    #[must_use]
    pub fn count(&self) -> u64 {
        self.families.len() as u64 + self.more
    }

    /// One line for a log or a report, `None` when nothing was left unread.
    #[must_use]
    pub fn summary(&self) -> Option<String> {
        if self.is_empty() {
            return None;
        }
        let mut parts = Vec::new();
        if !self.families.is_empty() || self.more > 0 {
            let names: Vec<&str> = self.families.iter().map(String::as_str).collect();
            let more = if self.more > 0 {
                format!(" and {} more", self.more)
            } else {
                String::new()
            };
            parts.push(format!("not read: {}{more}", names.join(", ")));
        }
        for (family, n) in &self.ambiguous {
            parts.push(format!(
                "{n} reading(s) of {family} refused: percent or 0..1 ratio could not be told (no # HELP saying which, and readings of 1: 1 % or 100 %)"
            ));
        }
        for (family, n) in &self.sentinels {
            parts.push(format!(
                "{n} reading(s) of {family} were DCGM's blank sentinel: left blank, never data"
            ));
        }
        for (family, n) in &self.non_finite {
            parts.push(format!(
                "{n} reading(s) of {family} were not a finite number: left blank, never data"
            ));
        }
        for (family, n) in &self.errors {
            parts.push(format!(
                "{n} reading(s) of {family} were an error the tool printed in place of a value: left blank, never data"
            ));
        }
        for (family, n) in &self.impossible {
            parts.push(format!(
                "{n} reading(s) of {family} were impossible (a value no device or engine gives: a negative count, size, rate or link value, a share outside 0..1, a clock-event bitmask that is no whole number): left blank, never data"
            ));
        }
        for (family, n) in &self.unnamed {
            parts.push(format!(
                "{n} reading(s) of {family} named no GPU (no gpu or UUID label): whose they are is unknown, so they were not read"
            ));
        }
        for (family, n) in &self.disagreeing {
            parts.push(format!(
                "{n} reading(s) of {family} disagreed with another series of the same GPU at the same time (two exporters reading it, or, in a history's step, one that restarted under a new instance within it): neither is known to be the GPU's, so the field was left blank; read one exporter (report: a --selector on its job or instance label)"
            ));
        }
        Some(parts.join("; "))
    }
}

/// One more of `key` in `counts` (the key copied only the first time).
fn add_one(counts: &mut BTreeMap<String, u64>, key: &str) {
    match counts.get_mut(key) {
        Some(n) => *n += 1,
        None => {
            counts.insert(key.to_owned(), 1);
        }
    }
}

/// The unit of a percent-or-ratio family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scale {
    /// 0–100.
    Percent,
    /// 0..1.
    Ratio,
}

/// The decided unit of each percent-or-ratio family of one source, kept by a reader that
/// reads the source with a new parser each time ([`super::DcgmTextParser::with_units`]).
///
/// A reader of summaries ([`Units::set_means`]: each value the mean of a step's raw
/// samples, as Prometheus' `avg_over_time` gives) takes no fraction as a ratio's sign: the
/// mean of whole percents 0, 0, 0 and 1 is 0.25. It decides from the raw samples' own
/// evidence first ([`Units::set_means`] off: each step's largest raw sample, a whole number
/// for a percent family), then reads the means with that decision.
#[derive(Debug, Clone, Default)]
pub struct Units {
    decided: Vec<(String, Scale)>,
    /// The values read are means of raw samples.
    means: bool,
}

impl Units {
    /// Whether the values read from now on are means of raw samples (a percent family's
    /// may be fractions); off, each is a raw sample.
    pub fn set_means(&mut self, means: bool) {
        self.means = means;
    }

    /// A `# HELP` line's text for family `name` (any case): decides its unit when the text
    /// says it.
    pub(crate) fn help(&mut self, name: &str, text: &str) {
        if let Some(scale) = scale_of_help(text) {
            self.set(name, scale);
        }
    }

    /// The help texts of family `name` (any case) from several targets, as Prometheus'
    /// metadata API lists them: they decide its unit where every text that says a unit says
    /// the same one. Returns whether they decided it; texts at odds decide nothing.
    pub fn help_texts<'a>(&mut self, name: &str, texts: impl IntoIterator<Item = &'a str>) -> bool {
        let mut said = None;
        for scale in texts.into_iter().filter_map(scale_of_help) {
            if said.is_some_and(|s| s != scale) {
                return false;
            }
            said = Some(scale);
        }
        said.map(|scale| self.set(name, scale)).is_some()
    }

    /// The unit of a reading `v` (not a blank) of family `name`, deciding it from the value
    /// where nothing did before; `None`: ambiguous or at odds with the decision, refused.
    /// A 0 before anything decided is read as a ratio without deciding: it is 0 in either
    /// unit.
    pub(crate) fn resolve(&mut self, name: &str, v: f64) -> Option<Scale> {
        // A mean of whole percents may be any fraction: no sign of a ratio.
        let fraction = v.fract() != 0.0 && !self.means;
        match self.get(name) {
            Some(Scale::Percent) if fraction && v <= 1.0 => None,
            Some(Scale::Ratio) if v > 1.0 => None,
            Some(scale) => Some(scale),
            None if v > 1.0 => Some(self.set(name, Scale::Percent)),
            None if fraction => Some(self.set(name, Scale::Ratio)),
            None if v == 0.0 => Some(Scale::Ratio),
            None => None,
        }
    }

    /// Families are metric names, matched in any case.
    fn get(&self, name: &str) -> Option<Scale> {
        self.decided
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|d| d.1)
    }

    fn set(&mut self, name: &str, scale: Scale) -> Scale {
        match self
            .decided
            .iter_mut()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
        {
            Some(d) => d.1 = scale,
            None => self.decided.push((name.to_ascii_lowercase(), scale)),
        }
        scale
    }
}

/// What a `# HELP` text says of the unit, if anything.
fn scale_of_help(text: &str) -> Option<Scale> {
    let t = text.to_ascii_lowercase();
    let says = |words: &[&str]| words.iter().any(|w| mentions(&t, w));
    if t.contains('%') || t.contains("percent") || says(&["0-100", "0 to 100", "0..100"]) {
        Some(Scale::Percent)
    } else if says(&["ratio", "0-1", "0 to 1", "0..1", "fraction"]) {
        Some(Scale::Ratio)
    } else {
        None
    }
}

/// Whether `text` holds `word` not followed by a digit: "0-1" is not in "0-100".
fn mentions(text: &str, word: &str) -> bool {
    text.match_indices(word).any(|(at, _)| {
        !text
            .as_bytes()
            .get(at + word.len())
            .is_some_and(u8::is_ascii_digit)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Means of raw samples: a fraction is no sign of a ratio (0, 0, 0 and 1 % average
    /// 0.25), nor at odds with a percent; above 1 is still a percent's, and what the raw
    /// samples decided holds.
    #[test]
    fn a_mean_of_whole_percents_is_no_ratio() {
        let f = "dcgm_fi_dev_gpu_util_ratio";
        let mut u = Units::default();
        u.set_means(true);
        assert_eq!(u.resolve(f, 0.25), None, "ambiguous, refused");
        assert_eq!(u.resolve(f, 37.5), Some(Scale::Percent));
        assert_eq!(u.resolve(f, 0.25), Some(Scale::Percent));
        // The raw samples' largest decided a ratio: the means read as one.
        let mut u = Units::default();
        assert_eq!(u.resolve(f, 0.8), Some(Scale::Ratio));
        u.set_means(true);
        assert_eq!(u.resolve(f, 0.25), Some(Scale::Ratio));
        assert_eq!(u.resolve(f, 1.5), None, "above 1 for a ratio family");
    }

    /// Several targets' help texts decide where those that say a unit agree.
    #[test]
    fn help_texts_decide_where_they_agree() {
        let f = "DCGM_FI_DEV_GPU_UTIL_RATIO";
        let mut u = Units::default();
        assert!(u.help_texts(
            f,
            ["GPU utilization (in %).", "", "GPU utilization (in %)."]
        ));
        assert_eq!(u.resolve(f, 1.0), Some(Scale::Percent));
        let mut u = Units::default();
        assert!(u.help_texts(f, ["GPU utilization as a ratio (0-1)."]));
        assert_eq!(u.resolve(f, 1.0), Some(Scale::Ratio));
        let mut u = Units::default();
        assert!(!u.help_texts(f, ["GPU utilization (in %).", "GPU utilization ratio."]));
        assert!(!u.help_texts(f, ["GPU utilization.", ""]));
        assert!(!u.help_texts(f, []));
        assert_eq!(u.resolve(f, 1.0), None, "nothing decided");
    }

    #[test]
    fn help_then_values_decide_and_ambiguity_is_refused() {
        let mut u = Units::default();
        let f = "dcgm_fi_dev_gpu_util_ratio";
        // 0 is 0 in either unit: read, and nothing decided by it.
        assert_eq!(
            u.resolve(f, 0.0),
            Some(Scale::Ratio),
            "0 before anything decided"
        );
        assert_eq!(u.resolve(f, 1.0), None, "1 % or 100 %: refused");
        assert_eq!(
            u.resolve(f, 0.95),
            Some(Scale::Ratio),
            "an INT64 percent cannot read 0.95"
        );
        assert_eq!(u.resolve(f, 1.0), Some(Scale::Ratio));
        assert_eq!(u.resolve(f, 37.0), None, "above 1 for a ratio family");
        let mut u = Units::default();
        assert_eq!(u.resolve(f, 37.0), Some(Scale::Percent));
        assert_eq!(u.resolve(f, 0.0), Some(Scale::Percent));
        assert_eq!(u.resolve(f, 0.5), None, "a fraction for a percent family");
        let mut u = Units::default();
        u.help(f, "GPU utilization (in %).");
        assert_eq!(u.resolve(f, 1.0), Some(Scale::Percent));
        let mut u = Units::default();
        u.help(f, "GPU utilization as a ratio (0-1).");
        assert_eq!(u.resolve(f, 0.0), Some(Scale::Ratio));
        // A range up to 100 is a percent, though it begins with a ratio's "0-1".
        for help in ["GPU utilization (0-100)", "Busy, 0 to 100.", "range 0..100"] {
            let mut p = Units::default();
            p.help(f, help);
            assert_eq!(p.resolve(f, 1.0), Some(Scale::Percent), "{help}");
            assert_eq!(p.resolve(f, 37.0), Some(Scale::Percent), "{help}");
        }
        // A family in another case is the same family.
        assert_eq!(
            u.resolve("DCGM_FI_DEV_GPU_UTIL_RATIO", 1.0),
            Some(Scale::Ratio)
        );
        u.help("other", "Nothing about units.");
        assert_eq!(u.resolve("other", 1.0), None);
    }

    /// DCGM's families in any case are named once, lower-case; other exporters' are not.
    #[test]
    fn dcgm_families_are_named_by_their_prefix() {
        let mut u = Unread::default();
        for n in [
            "DCGM_FI_PROF_NVLINK_TX_BYTES",
            "dcgm_fi_prof_nvlink_tx_bytes",
            "DCGM_EXP_XID_ERRORS_COUNT",
            "dcgm_sm_clock",
            "nvidia_smi_utilization_gpu_ratio",
            "xdcgm_fi_dev_x",
        ] {
            u.dcgm_family(n);
        }
        let names: Vec<&str> = u.families.iter().map(String::as_str).collect();
        assert_eq!(
            names,
            [
                "dcgm_exp_xid_errors_count",
                "dcgm_fi_prof_nvlink_tx_bytes",
                "dcgm_sm_clock"
            ]
        );
    }

    #[test]
    fn unread_names_are_capped_and_summarised() {
        let mut u = Unread::default();
        assert_eq!(u.summary(), None);
        for i in 0..MAX_UNREAD_NAMES + 3 {
            u.family(&format!("dcgm_fi_dev_x{i}"));
            u.family(&format!("dcgm_fi_dev_x{i}"));
        }
        assert_eq!(u.families.len(), MAX_UNREAD_NAMES);
        assert_eq!((u.more, u.count()), (6, MAX_UNREAD_NAMES as u64 + 6));
        u.refuse("dcgm_fi_dev_gpu_util_ratio");
        u.refuse("dcgm_fi_dev_gpu_util_ratio");
        let s = u.summary().unwrap();
        assert!(s.contains("and 6 more"), "{s}");
        assert!(
            s.contains("2 reading(s) of dcgm_fi_dev_gpu_util_ratio refused"),
            "{s}"
        );
    }
}
