//! The exporter-toolkit style web-config file (`WebConfig::parse`): no panic on any text;
//! every error names the file; TLS is never accepted without readable files; configured
//! users give a checker. Parse only: no password is verified, since a bcrypt verification
//! is slow by design.
//!
//! `tls_server_config` makes the parser read the certificate and key files. So that no
//! input can name a real file (or an endless one), the file is parsed as if it lived in a
//! directory that does not exist, and an input whose YAML holds a `/` or `\` outside
//! `basic_auth_users` is skipped (where the text is not YAML at all, the parser stops
//! before reading anything, and only a text without either character is given to it).

#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_yaml_ng::Value;
use std::path::Path;
use truthscale_exporter::http::web::WebConfig;

/// Whether any string in `v` (keys included) holds a path separator.
fn names_a_path(v: &Value) -> bool {
    match v {
        Value::String(s) => s.contains(['/', '\\']),
        Value::Sequence(items) => items.iter().any(names_a_path),
        Value::Mapping(m) => m.iter().any(|(k, v)| names_a_path(k) || names_a_path(v)),
        Value::Tagged(t) => names_a_path(&t.value) || t.tag.to_string().contains(['/', '\\']),
        Value::Null | Value::Bool(_) | Value::Number(_) => false,
    }
}

/// Whether the document could name a file outside the base directory. Only the TLS
/// settings are paths: the users and their hashes (which may hold `/`) are not looked at.
fn could_read_a_file(doc: &Value) -> bool {
    match doc {
        Value::Mapping(m) => m.iter().any(|(k, v)| {
            k.as_str() != Some("basic_auth_users") && (names_a_path(k) || names_a_path(v))
        }),
        other => names_a_path(other),
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let safe = match serde_yaml_ng::from_str::<Value>(text) {
        Ok(v) => !could_read_a_file(&v),
        // Not YAML: the parser fails before it reads any file. Escapes could still spell
        // a path in a text the strict reader accepts, so those are left out too.
        Err(_) => !text.contains(['/', '\\']),
    };
    if !safe {
        return;
    }
    let path = Path::new("/nonexistent-truthscale-fuzz/web.yml");
    match WebConfig::parse(text, path) {
        Ok(cfg) => {
            if let Some(auth) = cfg.basic_auth() {
                assert!(auth.user_count() > 0);
            }
            // Files in a missing directory cannot have been read.
            assert!(!cfg.tls_enabled(), "TLS accepted without readable files");
        }
        Err(e) => {
            let msg = e.to_string();
            assert!(
                msg.starts_with("/nonexistent-truthscale-fuzz/web.yml"),
                "the message names the file: {msg}"
            );
        }
    }
});
