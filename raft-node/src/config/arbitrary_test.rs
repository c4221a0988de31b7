//! Arbitrary flag values and configuration files, seeded: whatever they hold, reading them never panics,
//! and a refusal is one line naming the problem (what the binary prints before it exits).

use std::ffi::OsString;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::{flag_names, Config};

/// Values that have broken parsers before: empty, signs, overflow, units, URLs, separators, control
/// characters, long text.
const NASTY: &[&str] = &[
    "",
    "0",
    "-1",
    "18446744073709551616",
    "-9223372036854775809",
    "1e9",
    "0x10",
    "true",
    "maybe",
    "5x",
    "-5s",
    "1h2",
    "999999h",
    "http://",
    "http://127.0.0.1:99999",
    "https://[::1",
    "unix://",
    "unixs://a",
    "::::",
    "a=b=c",
    ",,,",
    "m1=",
    "=http://127.0.0.1:2380",
    "m1=http://127.0.0.1:2380,m1=http://127.0.0.1:2381",
    "\u{0}",
    "é",
    "%zz",
    "${HOME}",
    "InitialCorruptCheck=maybe",
    "AllAlpha=true,=false",
    "jwt,sign-method=none",
    "simple,ttl=-1",
];

fn value(rng: &mut StdRng) -> String {
    match rng.gen_range(0..10) {
        0 => "a".repeat(rng.gen_range(1000..6000)),
        1 => (0..rng.gen_range(0..20)).map(|_| char::from(rng.gen_range(0x20u8..0x7f))).collect(),
        2 => rng.gen::<i64>().to_string(),
        _ => NASTY[rng.gen_range(0..NASTY.len())].to_string(),
    }
}

/// Reads `args` as the binary does; a refusal must be one non-empty line. Whether it was refused.
fn assert_one_line_or_ok(args: &[OsString]) -> bool {
    let refusal = match Config::load(args.to_vec()) {
        Err(err) => err.one_line(),
        Ok(config) => match crate::cli::check(&config) {
            Ok(_) => return false,
            Err(line) => line,
        },
    };
    assert!(!refusal.trim().is_empty() && !refusal.contains('\n'), "{args:?} is refused with {refusal:?}");
    true
}

#[test]
fn arbitrary_flag_values_are_read_or_refused_in_one_line() {
    let mut rng = StdRng::seed_from_u64(17);
    let names = flag_names();
    let names: Vec<&String> = names.iter().filter(|n| !matches!(n.as_str(), "help" | "version")).collect();
    let mut refused = 0;
    for name in &names {
        for _ in 0..25 {
            let mut args: Vec<OsString> = vec!["raft-node".into(), format!("--{name}={}", value(&mut rng)).into()];
            if rng.gen_bool(0.3) {
                let other = names[rng.gen_range(0..names.len())];
                args.push(format!("--{other}={}", value(&mut rng)).into());
            }
            refused += usize::from(assert_one_line_or_ok(&args));
        }
    }
    // The values reach the parsers: many are refused, many are not.
    let tried = names.len() * 25;
    assert!(refused > tried / 10 && refused < tried * 9 / 10, "{refused} of {tried} refused");
    // Text that is not UTF-8 at all.
    use std::os::unix::ffi::OsStringExt;
    assert_one_line_or_ok(&["raft-node".into(), OsString::from_vec(b"--name=\xff\xfe".to_vec())]);
}

/// A YAML value of any shape, to depth 2.
fn yaml(rng: &mut StdRng, depth: u32) -> String {
    match rng.gen_range(0..if depth == 0 { 4 } else { 6 }) {
        0 => format!("{:?}", value(rng)),
        1 => value(rng)
            .replace(['\n', ':', '#', '{', '}', '[', ']', ',', '&', '*', '!', '|', '>', '\'', '"', '%', '@', '`'], ""),
        2 => ["null", "~", "true", "[]", "{}", "-1", "1.5"][rng.gen_range(0..7)].to_string(),
        3 => rng.gen::<u64>().to_string(),
        4 => format!("[{}, {}]", yaml(rng, depth - 1), yaml(rng, depth - 1)),
        _ => format!("{{cert-file: {}, bogus: {}}}", yaml(rng, depth - 1), yaml(rng, depth - 1)),
    }
}

#[test]
fn arbitrary_config_files_are_read_or_refused_in_one_line() {
    let mut rng = StdRng::seed_from_u64(29);
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("etcd.conf.yml");
    let mut keys = flag_names();
    keys.extend(["client-transport-security", "peer-transport-security", "not-a-key"].map(String::from));
    let mut refused = 0;
    for round in 0..1500 {
        let text = if round % 5 == 4 {
            // Bytes of any kind, some not UTF-8.
            (0..rng.gen_range(0..200)).map(|_| rng.gen::<u8>()).collect::<Vec<u8>>()
        } else {
            let lines: Vec<String> = (0..rng.gen_range(0..6))
                .map(|_| format!("{}: {}", keys[rng.gen_range(0..keys.len())], yaml(&mut rng, 2)))
                .collect();
            lines.join("\n").into_bytes()
        };
        std::fs::write(&path, &text).expect("write");
        refused += usize::from(assert_one_line_or_ok(&[
            "raft-node".into(),
            format!("--config-file={}", path.display()).into(),
        ]));
    }
    assert!(refused > 150 && refused < 1350, "{refused} of 1500 files refused");
}
