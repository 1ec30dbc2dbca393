//! `nvidia-smi --query-gpu … --format=csv` text, a line at a time: no panic; every value
//! finite and in its range; samples stamped in order unless their own timestamps say
//! otherwise; a bad line leaves the parser usable and names its line.

#![no_main]

use libfuzzer_sys::fuzz_target;
use truthscale_core::model::Timestamp;
use truthscale_core::parse::smi_csv::SmiCsvParser;
use truthscale_fuzz::check_line_parser;

fuzz_target!(|data: &[u8]| {
    let mut p = SmiCsvParser::new("fuzz", 1.0, Timestamp(0));
    check_line_parser(
        data,
        "sample",
        &mut p,
        SmiCsvParser::push_line,
        SmiCsvParser::finish,
        // A `timestamp` column stamps samples with their own (possibly repeated) times.
        SmiCsvParser::timestamped,
    );
});
