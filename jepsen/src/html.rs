//! The report's `index.html`: one self-contained page (inline style, no scripts, nothing fetched)
//! that a person opens first: the verdict, op counts, every checker's anomalies, the notes, the two
//! plots, the fault timeline, the options, and links to every other file of the report folder.
//!
//! Everything that comes from a run (anomaly descriptions quote values clients wrote, member logs
//! are named after members, fault details name victims) goes through [`escape`].

use std::fmt::Write as _;
use std::path::Path;

use crate::checker::Validity;
use crate::error::{Error, Result};
use crate::summary::Summary;

/// The most anomalies listed per checker; `summary.json` has them all.
const MAX_ANOMALIES: usize = 100;
/// The plots, in the order the page shows them.
const IMAGES: &[(&str, &str)] = &[
    ("latency.png", "Latency of every op by invocation time, fault windows shaded"),
    ("throughput.png", "Completed ops per second, fault windows shaded"),
];

/// The files of a report folder the page links to.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Files {
    /// The plots (`latency.png`, `throughput.png`) that exist.
    pub images: Vec<String>,
    /// Member logs (`*.log`), sorted.
    pub logs: Vec<String>,
    /// Every other file (summaries, histories, workload files), sorted.
    pub other: Vec<String>,
}

impl Files {
    /// The files directly inside `dir` (members' data dirs and other folders are not linked).
    pub fn scan(dir: &Path) -> Result<Files> {
        let entries = std::fs::read_dir(dir).map_err(Error::system(format!("list {}", dir.display())))?;
        let mut names: Vec<String> = Vec::new();
        for entry in entries {
            let entry = entry.map_err(Error::system(format!("list {}", dir.display())))?;
            if entry.file_type().is_ok_and(|t| t.is_file()) {
                names.push(entry.file_name().to_string_lossy().into_owned());
            }
        }
        Ok(Files::of(names))
    }

    /// Sorts file names into plots, logs and the rest; `index.html` itself is left out.
    pub fn of(mut names: Vec<String>) -> Files {
        names.sort();
        let mut files = Files::default();
        for (image, _) in IMAGES {
            if names.iter().any(|n| n == image) {
                files.images.push(image.to_string());
            }
        }
        for name in names {
            if name == "index.html" || files.images.contains(&name) {
                continue;
            }
            if name.ends_with(".log") {
                files.logs.push(name);
            } else {
                files.other.push(name);
            }
        }
        files
    }
}

/// Writes `<dir>/index.html` for the files now in `dir`.
pub fn write(dir: &Path, summary: &Summary) -> Result<()> {
    let files = Files::scan(dir)?;
    let path = dir.join("index.html");
    std::fs::write(&path, render(summary, &files)).map_err(Error::system(format!("write {}", path.display())))
}

/// Escapes text for HTML element content and quoted attribute values.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// The CSS class and word of a verdict.
fn verdict(valid: Validity) -> (&'static str, &'static str) {
    match valid {
        Validity::Valid => ("valid", "valid"),
        Validity::Invalid => ("invalid", "INVALID"),
        Validity::Unknown => ("unknown", "unknown"),
    }
}

const STYLE: &str = "body{font-family:sans-serif;margin:2em;max-width:1250px;color:#222}\
h1{font-size:1.5em;word-break:break-all}h2{font-size:1.2em;margin-top:1.6em}\
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:.25em .6em;text-align:left;\
vertical-align:top}th{background:#f3f3f3}.valid{color:#fff;background:#2ca02c}\
.invalid{color:#fff;background:#d62728}.unknown{color:#fff;background:#ff7f0e}\
.verdict{padding:.15em .5em;border-radius:.3em;font-weight:bold}.start{background:#fdeaea}\
.stop{background:#eaf6ea}ul.anomalies{margin:.2em 0 .8em 0}img{max-width:100%;border:1px solid #ccc;\
margin:.5em 0}code{background:#f3f3f3;padding:0 .2em}";

/// The whole page.
pub fn render(summary: &Summary, files: &Files) -> String {
    let mut out = String::new();
    let run = escape(&summary.run);
    let (class, word) = verdict(summary.valid);
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{run}: {word}</title>\
         <style>{STYLE}</style></head><body>\n<h1>{run}</h1>\n<p>Verdict: <span class=\"verdict {class}\">{word}\
         </span> after {:.1} s</p>\n",
        summary.duration_secs
    );
    // What a reader needs first comes first: the verdict and why, then the pictures, then detail.
    op_counts(&mut out, summary);
    checkers(&mut out, summary);
    if !summary.notes.is_empty() {
        out.push_str("<h2>Notes</h2>\n<ul>\n");
        for note in &summary.notes {
            let _ = writeln!(out, "<li>{}</li>", escape(note));
        }
        out.push_str("</ul>\n");
    }
    if !files.images.is_empty() {
        out.push_str("<h2>Plots</h2>\n");
        for image in &files.images {
            let alt = IMAGES.iter().find(|(name, _)| name == image).map_or("", |(_, alt)| alt);
            let (image, alt) = (escape(image), escape(alt));
            let _ = writeln!(out, "<p><a href=\"{image}\"><img src=\"{image}\" alt=\"{alt}\"></a></p>");
        }
    }
    faults(&mut out, summary);
    options(&mut out, summary);
    links(&mut out, files);
    out.push_str("</body></html>\n");
    out
}

/// The run's flags, as `summary.json` has them (so new flags show up without touching this page).
fn options(out: &mut String, summary: &Summary) {
    out.push_str("<h2>Options</h2>\n<table>\n");
    if let Ok(serde_json::Value::Object(map)) = serde_json::to_value(&summary.options) {
        for (name, value) in map {
            let value = match value {
                serde_json::Value::Null => "(default)".to_string(),
                serde_json::Value::String(s) => s,
                serde_json::Value::Array(items) => items
                    .iter()
                    .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_string))
                    .collect::<Vec<_>>()
                    .join(", "),
                other => other.to_string(),
            };
            let _ = writeln!(out, "<tr><th>{}</th><td>{}</td></tr>", escape(&name), escape(&value));
        }
    }
    out.push_str("</table>\n");
}

fn op_counts(out: &mut String, summary: &Summary) {
    let c = summary.ops;
    let _ = writeln!(
        out,
        "<h2>Operations</h2>\n<table><tr><th>invoked</th><th>ok</th><th>fail</th><th>info</th></tr>\
         <tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr></table>",
        c.invoked, c.ok, c.fail, c.info
    );
}

fn checkers(out: &mut String, summary: &Summary) {
    out.push_str("<h2>Checkers</h2>\n<table>\n<tr><th>checker</th><th>verdict</th><th>anomalies</th></tr>\n");
    for result in &summary.results {
        let (class, word) = verdict(result.valid);
        let _ = write!(
            out,
            "<tr><td>{}</td><td><span class=\"verdict {class}\">{word}</span></td><td>",
            escape(&result.checker)
        );
        if !result.anomalies.is_empty() {
            out.push_str("<ul class=\"anomalies\">");
            for anomaly in result.anomalies.iter().take(MAX_ANOMALIES) {
                let _ = write!(out, "<li><b>{:?}</b>: {}</li>", anomaly.kind, escape(&anomaly.description));
            }
            if result.anomalies.len() > MAX_ANOMALIES {
                let more = result.anomalies.len() - MAX_ANOMALIES;
                let _ = write!(out, "<li>… {more} more in <a href=\"summary.json\">summary.json</a></li>");
            }
            out.push_str("</ul>");
        }
        out.push_str("</td></tr>\n");
    }
    out.push_str("</table>\n");
}

fn faults(out: &mut String, summary: &Summary) {
    out.push_str("<h2>Fault timeline</h2>\n");
    if summary.faults.is_empty() {
        out.push_str("<p>No nemesis events.</p>\n");
        return;
    }
    out.push_str("<table>\n<tr><th>time (s)</th><th>event</th><th>fault</th><th>detail</th></tr>\n");
    for event in &summary.faults {
        let f = escape(event.f);
        let _ = writeln!(
            out,
            "<tr class=\"{f}\"><td>{:.3}</td><td>{f}</td><td>{}</td><td>{}</td></tr>",
            event.time_ns as f64 / 1e9,
            escape(event.fault.name()),
            escape(&event.detail)
        );
    }
    out.push_str("</table>\n");
}

fn links(out: &mut String, files: &Files) {
    out.push_str("<h2>Files</h2>\n<ul>\n");
    for name in files.other.iter().chain(&files.logs) {
        let name = escape(name);
        let _ = writeln!(out, "<li><a href=\"{name}\"><code>{name}</code></a></li>");
    }
    out.push_str("</ul>\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checker::{Anomaly, AnomalyKind, CheckResult};
    use crate::nemesis::NemesisEvent;
    use crate::options::{FaultKind, TestOptions};
    use crate::summary::OpCounts;

    fn summary() -> Summary {
        let opts = TestOptions::parse(&["--nemesis", "partition-leader,kill-one"]).expect("valid flags");
        let stale = Anomaly::new(AnomalyKind::NotLinearizable, "read <script>alert(1)</script> & \"stale\"");
        Summary {
            run: "ours-register-seed1".to_string(),
            valid: Validity::Invalid,
            options: opts,
            ops: OpCounts { invoked: 10, ok: 7, fail: 1, info: 2 },
            results: vec![
                CheckResult::from_anomalies("linear", vec![stale]),
                CheckResult::from_anomalies("logs", vec![]),
            ],
            notes: vec!["plots: a <b>note</b>".to_string()],
            faults: vec![NemesisEvent {
                time_ns: 3_000_000_000,
                f: "start",
                fault: FaultKind::PartitionLeader,
                detail: "isolated n2 (leader)".to_string(),
            }],
            duration_secs: 25.0,
        }
    }

    #[test]
    fn escapes_markup() {
        let cases = [
            ("plain", "plain"),
            ("<a href='x'>", "&lt;a href=&#39;x&#39;&gt;"),
            ("a & \"b\"", "a &amp; &quot;b&quot;"),
            ("&amp;", "&amp;amp;"),
        ];
        for (text, want) in cases {
            assert_eq!(escape(text), want, "{text}");
        }
    }

    #[test]
    fn page_shows_the_run_and_escapes_what_it_quotes() {
        let files = Files::of(
            ["n2.log", "latency.png", "summary.json", "index.html", "n1.log", "history.jsonl"]
                .map(str::to_string)
                .to_vec(),
        );
        assert_eq!(files.images, vec!["latency.png"]);
        assert_eq!(files.logs, vec!["n1.log", "n2.log"]);
        assert_eq!(files.other, vec!["history.jsonl", "summary.json"]);

        let page = render(&summary(), &files);
        assert!(!page.contains("<script>"), "anomaly text must be escaped");
        assert!(page.contains("read &lt;script&gt;alert(1)&lt;/script&gt; &amp; &quot;stale&quot;"), "{page}");
        assert!(page.contains("a &lt;b&gt;note&lt;/b&gt;"), "notes are escaped");
        assert!(page.contains("<span class=\"verdict invalid\">INVALID</span>"));
        assert!(page.contains("<span class=\"verdict valid\">valid</span>"), "the logs checker passed");
        assert!(page.contains("<img src=\"latency.png\""));
        assert!(!page.contains("throughput.png"), "only plots that exist are shown");
        assert!(page.contains("<a href=\"n1.log\">") && page.contains("<a href=\"history.jsonl\">"));
        assert!(page.contains("partition-leader, kill-one"), "options are listed");
        assert!(page.contains("isolated n2 (leader)") && page.contains("3.000"), "the fault timeline");
        assert!(!page.contains("http://") && !page.contains("https://"), "nothing external");
    }

    #[test]
    fn write_links_the_files_of_the_folder() {
        let dir = tempfile::tempdir().expect("tempdir");
        for name in ["summary.json", "n1.log", "throughput.png"] {
            std::fs::write(dir.path().join(name), "x").expect("write");
        }
        std::fs::create_dir(dir.path().join("members")).expect("mkdir");
        write(dir.path(), &summary()).expect("write the page");
        let page = std::fs::read_to_string(dir.path().join("index.html")).expect("read the page");
        assert!(page.contains("<img src=\"throughput.png\""));
        assert!(page.contains("<a href=\"n1.log\">") && page.contains("<a href=\"summary.json\">"));
        assert!(!page.contains("href=\"members\""), "folders are not linked");
    }
}
