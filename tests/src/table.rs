//! Parsing of etcdctl's `-w table` output, checking its exact layout on the way.
//!
//! etcdctl 3.4 draws tables with `olekukonko/tablewriter`: `+---+` borders above and below the
//! header and at the end, header cells centered (extra space on the right), body cells
//! right-aligned, one space of padding on each side of every cell, each column as wide as its
//! widest cell. The layout comes from etcdctl, so two servers only differ in the cell values.

use anyhow::{bail, Context};

/// A parsed table: the header and the rows, cells trimmed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Table {
    pub header: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

impl Table {
    /// Parses `text`, failing on anything tablewriter would not have drawn.
    pub fn parse(text: &str) -> anyhow::Result<Table> {
        let lines: Vec<&str> = text.lines().collect();
        if !text.ends_with('\n') || lines.len() < 4 {
            bail!("not an etcdctl table: {text:?}");
        }
        let border = lines[0];
        let widths: Vec<usize> = border
            .strip_prefix('+')
            .and_then(|rest| rest.strip_suffix('+'))
            .with_context(|| format!("bad border {border:?}"))?
            .split('+')
            .map(|dashes| match dashes.len() {
                len if len >= 3 && dashes.bytes().all(|b| b == b'-') => Ok(len - 2),
                _ => Err(anyhow::anyhow!("bad border {border:?}")),
            })
            .collect::<anyhow::Result<_>>()?;
        let last = lines.len() - 1;
        for at in [2, last] {
            if lines[at] != border {
                bail!("line {at} should repeat the border {border:?}: {text}");
            }
        }
        let header = cells(lines[1], &widths, Align::Center).with_context(|| format!("header of\n{text}"))?;
        let rows = lines[3..last]
            .iter()
            .map(|line| cells(line, &widths, Align::Right).with_context(|| format!("row of\n{text}")))
            .collect::<anyhow::Result<_>>()?;
        Ok(Table { header, rows })
    }

    /// The cell of `row` in the column named `column`.
    ///
    /// # Panics
    /// If there is no such column or row: a test asking for one expects it.
    #[track_caller]
    pub fn cell(&self, row: usize, column: &str) -> &str {
        let at = self
            .header
            .iter()
            .position(|name| name == column)
            .unwrap_or_else(|| panic!("no column {column:?} in {:?}", self.header));
        &self.rows[row][at]
    }

    /// Every cell of the column named `column`, top to bottom.
    #[track_caller]
    pub fn column(&self, column: &str) -> Vec<&str> {
        (0..self.rows.len()).map(|row| self.cell(row, column)).collect()
    }
}

#[derive(Debug, Clone, Copy)]
enum Align {
    Center,
    Right,
}

/// Splits `| a | b |` into its trimmed cells, checking each cell's width and alignment.
fn cells(line: &str, widths: &[usize], align: Align) -> anyhow::Result<Vec<String>> {
    let mut rest = line.strip_prefix('|').with_context(|| format!("{line:?}"))?;
    let mut out = Vec::with_capacity(widths.len());
    for &width in widths {
        // Cells are ASCII here (IDs, URLs, numbers, names), so bytes are columns.
        let (cell, tail) = rest.split_at_checked(width + 2).with_context(|| format!("short line {line:?}"))?;
        rest = tail.strip_prefix('|').with_context(|| format!("misaligned {line:?}"))?;
        let value = cell.trim();
        let gap = width - value.len().min(width);
        let drawn = match align {
            Align::Center => format!(" {}{value}{} ", " ".repeat(gap / 2), " ".repeat(gap - gap / 2)),
            Align::Right => format!(" {value:>width$} "),
        };
        if cell != drawn {
            bail!("cell {cell:?} should be drawn {drawn:?} ({align:?}) in {line:?}");
        }
        out.push(value.to_owned());
    }
    if !rest.is_empty() {
        bail!("extra cells in {line:?}");
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `etcdctl member list -w table` from etcd 3.4.23.
    const MEMBER_LIST: &str = "\
+------------------+---------+------+------------------------+------------------------+------------+
|        ID        | STATUS  | NAME |       PEER ADDRS       |      CLIENT ADDRS      | IS LEARNER |
+------------------+---------+------+------------------------+------------------------+------------+
| 11bfff8beea8f572 | started |   n3 | http://127.0.0.1:32382 | http://127.0.0.1:32372 |      false |
| 55c4083f25f8d1f6 | started |   n2 | http://127.0.0.1:32381 | http://127.0.0.1:32371 |      false |
+------------------+---------+------+------------------------+------------------------+------------+
";

    #[test]
    fn parses_etcdctl_tables() {
        let table = Table::parse(MEMBER_LIST).expect("parse");
        assert_eq!(table.header, ["ID", "STATUS", "NAME", "PEER ADDRS", "CLIENT ADDRS", "IS LEARNER"]);
        assert_eq!(table.rows.len(), 2);
        assert_eq!(table.column("NAME"), ["n3", "n2"]);
        assert_eq!(table.cell(1, "CLIENT ADDRS"), "http://127.0.0.1:32371");
        let empty_cells = "+---+----+\n| A | BB |\n+---+----+\n|   |  x |\n+---+----+\n";
        assert_eq!(Table::parse(empty_cells).expect("parse").rows, [vec![String::new(), "x".to_owned()]]);
    }

    #[test]
    fn rejects_other_layouts() {
        let cases = [
            ("left-aligned cell", MEMBER_LIST.replace("|   n3 |", "| n3   |")),
            ("header not centered", MEMBER_LIST.replace("| STATUS  |", "|  STATUS |")),
            ("no trailing newline", MEMBER_LIST.trim_end().to_owned()),
            ("missing bottom border", MEMBER_LIST.lines().take(5).collect::<Vec<_>>().join("\n") + "\n"),
            ("ragged row", MEMBER_LIST.replace("|      false |\n| 55", "|     false |\n| 55")),
        ];
        for (what, text) in cases {
            assert!(Table::parse(&text).is_err(), "{what}: {text}");
        }
    }
}
