//! etcdctl's `table` format (olekukonko/tablewriter as etcdctl configures it: upper-case centred
//! headers, right-aligned cells), plus the row builders the `simple` format shares with it.
//!
//! etcdctl 3.4 has tables only for cluster views; for kv responses it sends the request and then
//! fails with `table not supported as output format` (see [`super::Printer`]).

use proto::etcdserverpb as pb;

use super::simple::humanize_bytes;

pub type Table = (Vec<&'static str>, Vec<Vec<String>>);

pub fn member_list(resp: &pb::MemberListResponse) -> Table {
    let header = vec!["ID", "Status", "Name", "Peer Addrs", "Client Addrs", "Is Learner"];
    let rows = resp
        .members
        .iter()
        .map(|m| {
            vec![
                format!("{:x}", m.id),
                if m.name.is_empty() { "unstarted" } else { "started" }.to_string(),
                m.name.clone(),
                m.peer_ur_ls.join(","),
                m.client_ur_ls.join(","),
                m.is_learner.to_string(),
            ]
        })
        .collect();
    (header, rows)
}

pub fn endpoint_status(statuses: &[(String, pb::StatusResponse)]) -> Table {
    let header = vec![
        "endpoint",
        "ID",
        "version",
        "db size",
        "is leader",
        "is learner",
        "raft term",
        "raft index",
        "raft applied index",
        "errors",
    ];
    let rows = statuses
        .iter()
        .map(|(endpoint, s)| {
            let member_id = s.header.as_ref().map_or(0, |h| h.member_id);
            vec![
                endpoint.clone(),
                format!("{member_id:x}"),
                s.version.clone(),
                humanize_bytes(u64::try_from(s.db_size).unwrap_or(0)),
                (s.leader == member_id).to_string(),
                s.is_learner.to_string(),
                s.raft_term.to_string(),
                s.raft_index.to_string(),
                s.raft_applied_index.to_string(),
                s.errors.join(", "),
            ]
        })
        .collect();
    (header, rows)
}

pub fn endpoint_hashkv(hashes: &[(String, pb::HashKvResponse)]) -> Table {
    let rows = hashes.iter().map(|(endpoint, h)| vec![endpoint.clone(), h.hash.to_string()]).collect();
    (vec!["endpoint", "hash"], rows)
}

pub fn endpoint_health(list: &[super::EndpointHealth]) -> Table {
    let rows =
        list.iter().map(|h| vec![h.endpoint.clone(), h.health.to_string(), h.took.clone(), h.error.clone()]).collect();
    (vec!["endpoint", "health", "took", "error"], rows)
}

/// The `simple` rendering of a table: each row joined with `, `.
pub fn simple((_, rows): &Table) -> String {
    rows.iter().map(|row| format!("{}\n", row.join(", "))).collect()
}

/// Renders like tablewriter with `SetAlignment(ALIGN_RIGHT)`. Widths count chars; tablewriter's
/// wrapping of cells over 30 columns that contain spaces is not reproduced.
pub fn render((header, rows): &Table) -> String {
    let header: Vec<String> = header.iter().map(|h| h.replace('_', " ").trim().to_uppercase()).collect();
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line: String =
        widths.iter().map(|w| format!("+{}", "-".repeat(w + 2))).chain(std::iter::once("+\n".to_string())).collect();
    let mut out = line.clone();
    for (h, w) in header.iter().zip(&widths) {
        let gap = w - h.chars().count();
        let left = gap / 2;
        out.push_str(&format!("| {}{}{} ", " ".repeat(left), h, " ".repeat(gap - left)));
    }
    out.push_str("|\n");
    out.push_str(&line);
    for row in rows {
        for (cell, w) in row.iter().zip(&widths) {
            out.push_str(&format!("| {cell:>w$} "));
        }
        out.push_str("|\n");
    }
    // tablewriter closes the table even when it has no rows (a header between two lines).
    out.push_str(&line);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_like_tablewriter() {
        let table = (vec!["endpoint", "hash"], vec![vec!["127.0.0.1:23791".to_string(), "4003631519".to_string()]]);
        assert_eq!(
            render(&table),
            "+-----------------+------------+\n\
             |    ENDPOINT     |    HASH    |\n\
             +-----------------+------------+\n\
             | 127.0.0.1:23791 | 4003631519 |\n\
             +-----------------+------------+\n"
        );
        assert_eq!(simple(&table), "127.0.0.1:23791, 4003631519\n");
        let empty = (vec!["endpoint", "hash"], Vec::new());
        assert_eq!(
            render(&empty),
            "+----------+------+\n| ENDPOINT | HASH |\n+----------+------+\n+----------+------+\n"
        );
    }
}
