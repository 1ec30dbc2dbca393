//! `dcgmi dmon` text, a line at a time: no panic; every value finite; sweeps stamped in
//! order; a bad line leaves the parser usable and names its line.

#![no_main]

use libfuzzer_sys::fuzz_target;
use truthscale_core::model::Timestamp;
use truthscale_core::parse::DmonParser;
use truthscale_fuzz::check_line_parser;

fuzz_target!(|data: &[u8]| {
    let mut p = DmonParser::new("fuzz", 1.0, Timestamp(0));
    check_line_parser(
        data,
        "sweep",
        &mut p,
        DmonParser::push_line,
        DmonParser::finish,
        // dmon has no timestamps: every sweep is stamped by the parser.
        |_| false,
    );
});
