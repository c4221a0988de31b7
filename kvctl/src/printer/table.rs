//! etcdctl's `table` format (olekukonko/tablewriter as etcdctl configures it: upper-case centred
//! headers, right-aligned cells), plus the row builders the `simple` format shares with it.
//!
//! etcdctl 3.4 has tables only for cluster views; for kv responses it sends the request and then
//! fails with `table not supported as output format` (see [`super::Printer`]).

use proto::etcdserverpb as pb;

use super::simple::humanize_bytes;
use crate::dialect::Dialect;

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

/// etcdctl 3.6's columns (the storage version, the size in use and the share not in use, the quota, the
/// downgrade target and state); etcdctl 3.4 prints the others.
const STATUS_COLUMNS: [&str; 16] = [
    "endpoint",
    "ID",
    "version",
    "storage version",
    "db size",
    "in use",
    "percentage not in use",
    "quota",
    "is leader",
    "is learner",
    "raft term",
    "raft index",
    "raft applied index",
    "errors",
    "downgrade target version",
    "downgrade enabled",
];
/// The columns etcdctl 3.4 has, by their place in [`STATUS_COLUMNS`].
const STATUS_COLUMNS_34: [usize; 10] = [0, 1, 2, 4, 8, 9, 10, 11, 12, 13];

pub fn endpoint_status(statuses: &[(String, pb::StatusResponse)], dialect: Dialect) -> Table {
    let rows = statuses
        .iter()
        .map(|(endpoint, s)| {
            let member_id = s.header.as_ref().map_or(0, |h| h.member_id);
            let bytes = |n: i64| humanize_bytes(u64::try_from(n).unwrap_or(0));
            // Go: int(float64(100 - inUse*100/size)), integer division first.
            let not_in_use = if s.db_size > 0 { 100 - s.db_size_in_use * 100 / s.db_size } else { 0 };
            let downgrade = s.downgrade_info.as_ref();
            vec![
                endpoint.clone(),
                format!("{member_id:x}"),
                s.version.clone(),
                s.storage_version.clone(),
                bytes(s.db_size),
                bytes(s.db_size_in_use),
                format!("{not_in_use}%"),
                bytes(s.db_size_quota),
                (s.leader == member_id).to_string(),
                s.is_learner.to_string(),
                s.raft_term.to_string(),
                s.raft_index.to_string(),
                s.raft_applied_index.to_string(),
                s.errors.join(", "),
                downgrade.map(|d| d.target_version.clone()).unwrap_or_default(),
                downgrade.is_some_and(|d| d.enabled).to_string(),
            ]
        })
        .collect::<Vec<_>>();
    match dialect {
        Dialect::V3_6 => (STATUS_COLUMNS.to_vec(), rows),
        Dialect::V3_4 => {
            let pick = |row: &[String]| STATUS_COLUMNS_34.iter().map(|&i| row[i].clone()).collect();
            (STATUS_COLUMNS_34.iter().map(|&i| STATUS_COLUMNS[i]).collect(), rows.iter().map(|r| pick(r)).collect())
        }
    }
}

pub fn endpoint_hashkv(hashes: &[(String, pb::HashKvResponse)], dialect: Dialect) -> Table {
    if dialect == Dialect::V3_6 {
        let rows = hashes
            .iter()
            .map(|(endpoint, h)| vec![endpoint.clone(), h.hash.to_string(), h.hash_revision.to_string()])
            .collect();
        return (vec!["endpoint", "hash", "hash_revision"], rows);
    }
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

    fn status() -> (String, pb::StatusResponse) {
        let header = pb::ResponseHeader { member_id: 0x8e9e_05c5_2164_694d, raft_term: 2, ..Default::default() };
        let status = pb::StatusResponse {
            header: Some(header),
            version: "3.6.14".into(),
            storage_version: "3.6.0".into(),
            db_size: 20480,
            db_size_in_use: 16384,
            db_size_quota: 2_147_483_648,
            leader: 0x8e9e_05c5_2164_694d,
            raft_term: 2,
            raft_index: 9,
            raft_applied_index: 9,
            downgrade_info: Some(pb::DowngradeInfo::default()),
            ..Default::default()
        };
        ("127.0.0.1:2379".into(), status)
    }

    #[test]
    fn endpoint_status_has_etcdctl_36s_columns_or_34s() {
        let statuses = [status()];
        assert_eq!(
            simple(&endpoint_status(&statuses, Dialect::V3_6)),
            "127.0.0.1:2379, 8e9e05c52164694d, 3.6.14, 3.6.0, 20 kB, 16 kB, 20%, 2.1 GB, true, false, 2, 9, 9, , , false\n"
        );
        assert_eq!(
            simple(&endpoint_status(&statuses, Dialect::V3_4)),
            "127.0.0.1:2379, 8e9e05c52164694d, 3.6.14, 20 kB, true, false, 2, 9, 9, \n"
        );
        let header = render(&endpoint_status(&statuses, Dialect::V3_6));
        let header = header.lines().nth(1).expect("a header line");
        for column in [
            "STORAGE VERSION",
            "IN USE",
            "PERCENTAGE NOT IN USE",
            "QUOTA",
            "DOWNGRADE TARGET VERSION",
            "DOWNGRADE ENABLED",
        ] {
            assert!(header.contains(column), "{header}");
        }
        let hash = pb::HashKvResponse { hash: 7, hash_revision: 12, compact_revision: 3, ..Default::default() };
        let hashes = [("127.0.0.1:2379".to_string(), hash)];
        assert_eq!(simple(&endpoint_hashkv(&hashes, Dialect::V3_6)), "127.0.0.1:2379, 7, 12\n");
        assert_eq!(simple(&endpoint_hashkv(&hashes, Dialect::V3_4)), "127.0.0.1:2379, 7\n");
        let json = super::super::json::endpoint_status(&statuses, Dialect::V3_6);
        assert!(
            json.contains(",\"storageVersion\":\"3.6.0\",\"dbSizeQuota\":2147483648,\"downgradeInfo\":{}}"),
            "{json}"
        );
        let fields =
            super::super::fields::endpoint_status(&statuses, super::super::fields::Style::new(Dialect::V3_6, false));
        assert!(fields.contains("\"StorageVersion\" : \"3.6.0\"\n\"DBSize\" : 20480\n\"DBSizeInUse\" : 16384\n\"DBSizeQuota\" : 2147483648\n"), "{fields}");
        assert!(fields.ends_with("\"DowngradeTargetVersion\" : \"\"\n\"DowngradeEnabled\" : false\n\n"), "{fields}");
    }
}
