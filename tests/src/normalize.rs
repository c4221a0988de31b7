//! Masking of member-specific values, so that two servers' etcdctl outputs compare line by line.
//!
//! What differs between two correct servers, and is masked:
//! - the cluster and member IDs (hex in simple/table output, decimal in JSON);
//! - the client and peer ports;
//! - the Raft term (etcd's first leader has term 2, an openraft one term 1);
//! - durations (`took = 1.2ms`);
//! - the Go client's retry warnings on stderr (timestamps, random client IDs). The `Error:` line
//!   etcdctl prints is kept.

/// Replaces the values of one member with placeholders.
#[derive(Debug, Clone)]
pub struct Masks {
    /// (literal, placeholder), longest literal first so that no literal hides inside another.
    literals: Vec<(String, &'static str)>,
}

impl Masks {
    /// Masks for a member with these IDs and addresses (`127.0.0.1:P`).
    pub fn new(cluster_id: u64, member_id: u64, client_endpoint: &str, peer_endpoint: &str) -> Masks {
        let mut literals = vec![
            (client_endpoint.to_owned(), "<client>"),
            (peer_endpoint.to_owned(), "<peer>"),
            (cluster_id.to_string(), "<cluster_id>"),
            (format!("{cluster_id:x}"), "<cluster_id>"),
            (member_id.to_string(), "<member_id>"),
            (format!("{member_id:x}"), "<member_id>"),
        ];
        literals.sort_by_key(|(literal, _)| std::cmp::Reverse(literal.len()));
        Masks { literals }
    }

    /// Applies every mask to one command's stdout or stderr.
    pub fn apply(&self, text: &str) -> String {
        let mut out = text.to_owned();
        for (literal, placeholder) in &self.literals {
            out = out.replace(literal, placeholder);
        }
        // JSON (`-w json`) and the fields format (`-w fields`).
        for prefix in ["\"raft_term\":", "\"raftTerm\":", "\"RaftTerm\" : "] {
            out = mask_number(&out, prefix, "<term>");
        }
        out = mask_after(&out, "took = ", "<duration>");
        out = mask_after(&out, "\"took\":\"", "<duration>\"");
        out
    }
}

/// Drops the Go client's JSON log lines from etcdctl's stderr.
pub fn strip_client_logs(stderr: &str) -> String {
    stderr.lines().filter(|line| !line.starts_with("{\"level\":")).map(|line| format!("{line}\n")).collect()
}

/// Replaces the digits after every `prefix` with `placeholder`.
fn mask_number(text: &str, needle: &str, placeholder: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(needle) {
        let after = at + needle.len();
        out.push_str(&rest[..after]);
        let digits = rest[after..].bytes().take_while(u8::is_ascii_digit).count();
        out.push_str(if digits > 0 { placeholder } else { "" });
        rest = &rest[after + digits..];
    }
    out.push_str(rest);
    out
}

/// Replaces what follows every `prefix` up to the next `,`, `"`, or end of line with `placeholder`.
fn mask_after(text: &str, prefix: &str, placeholder: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(prefix) {
        let after = at + prefix.len();
        out.push_str(&rest[..after]);
        out.push_str(placeholder);
        let end = rest[after..].find([',', '"', '\n']).map_or(rest.len(), |i| after + i);
        // The placeholder of a quoted value carries its closing quote.
        rest = if placeholder.ends_with('"') && rest[end..].starts_with('"') { &rest[end + 1..] } else { &rest[end..] };
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_ids_ports_terms_and_durations() {
        let masks = Masks::new(15118495548433857066, 13668033151171901709, "127.0.0.1:23791", "127.0.0.1:23801");
        let cases = [
            (
                r#"{"header":{"cluster_id":15118495548433857066,"member_id":13668033151171901709,"revision":2,"raft_term":2}}"#,
                r#"{"header":{"cluster_id":<cluster_id>,"member_id":<member_id>,"revision":2,"raft_term":<term>}}"#,
            ),
            (
                "bdae9bbc11dd390d, started, m1, http://127.0.0.1:23801, http://127.0.0.1:23791, false\n",
                "<member_id>, started, m1, http://<peer>, http://<client>, false\n",
            ),
            (
                "127.0.0.1:23791 is healthy: successfully committed proposal: took = 1.84ms\n",
                "<client> is healthy: successfully committed proposal: took = <duration>\n",
            ),
            (
                r#"[{"endpoint":"127.0.0.1:23791","health":true,"took":"1.9ms"}]"#,
                r#"[{"endpoint":"<client>","health":true,"took":"<duration>"}]"#,
            ),
            (
                "\"ClusterID\" : 15118495548433857066\n\"RaftTerm\" : 2\n",
                "\"ClusterID\" : <cluster_id>\n\"RaftTerm\" : <term>\n",
            ),
            ("foo\nbar\n", "foo\nbar\n"),
        ];
        for (input, want) in cases {
            assert_eq!(masks.apply(input), want, "input: {input}");
        }
    }

    #[test]
    fn strips_go_client_warnings_only() {
        let stderr =
            "{\"level\":\"warn\",\"ts\":\"2026-11-22T03:19:36.514Z\"}\nError: etcdserver: key is not provided\n";
        assert_eq!(strip_client_logs(stderr), "Error: etcdserver: key is not provided\n");
    }
}
