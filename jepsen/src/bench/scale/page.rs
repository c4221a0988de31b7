//! `scale.html`: one self-contained page (no scripts, nothing fetched) with the table, the writer's
//! latency plot and links to the other files of the report folder.

use std::fmt::Write as _;

use crate::html::escape;

/// The page for `table`, showing `image` (a file beside it) when there is one and linking `files`.
pub fn render(title: &str, table: &str, image: Option<&str>, files: &[String]) -> String {
    let mut out = String::new();
    let _ = write!(
        out,
        "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>{title}</title>\n\
         <style>body{{font-family:sans-serif;margin:2em}}pre{{background:#f6f6f6;padding:1em}}</style></head>\n\
         <body><h1>{title}</h1>\n<pre>{table}</pre>\n",
        title = escape(title),
        table = escape(table)
    );
    if let Some(image) = image {
        let _ = writeln!(
            out,
            "<h2>Put latency of the concurrent writer; compaction and defrag shaded</h2>\n<img src=\"{0}\" alt=\"{0}\">",
            escape(image)
        );
    }
    out.push_str("<h2>Files</h2>\n<ul>\n");
    for file in files {
        let _ = writeln!(out, "<li><a href=\"{0}\">{0}</a></li>", escape(file));
    }
    out.push_str("</ul>\n</body></html>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_escapes_the_table_and_links_every_file() {
        let page = render("scale <run>", "a < b", Some("scale.png"), &["scale.json".into(), "etcd.log".into()]);
        assert!(page.contains("<pre>a &lt; b</pre>") && page.contains("scale &lt;run&gt;"), "{page}");
        assert!(page.contains("<img src=\"scale.png\""), "{page}");
        assert!(page.contains("<a href=\"etcd.log\">etcd.log</a>"), "{page}");
        assert!(!render("t", "", None, &[]).contains("<img"));
    }
}
