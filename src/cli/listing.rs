//! One entry of a snapshot as a line: the path alone, `ls -l`'s columns, or
//! a JSON object (`ls`, `find`).

use serde_json::{json, Value};

use crate::format::{Node, NodeKind};
use crate::util::{dev_major, dev_minor, short_time};

/// The type letter and symbolic permissions, as `ls -l` shows them
/// (`drwxr-xr-x`, `-rwsr-xr-x`, `drwxrwxrwt`).
pub fn mode_string(node: &Node) -> String {
    let kind = match node.kind {
        NodeKind::File => '-',
        NodeKind::Dir => 'd',
        NodeKind::Symlink => 'l',
        NodeKind::Fifo => 'p',
        NodeKind::CharDevice => 'c',
        NodeKind::BlockDevice => 'b',
        NodeKind::Socket => 's',
    };
    let m = node.mode;
    let bit = |mask: u32, c: char| if m & mask != 0 { c } else { '-' };
    // The execute column of each class, with setuid, setgid or sticky.
    let exec = |x: u32, special: u32, set: char, unset: char| match (m & x != 0, m & special != 0) {
        (true, true) => set,
        (false, true) => unset,
        (true, false) => 'x',
        (false, false) => '-',
    };
    let mut s = String::with_capacity(10);
    s.push(kind);
    s.push(bit(0o400, 'r'));
    s.push(bit(0o200, 'w'));
    s.push(exec(0o100, 0o4000, 's', 'S'));
    s.push(bit(0o040, 'r'));
    s.push(bit(0o020, 'w'));
    s.push(exec(0o010, 0o2000, 's', 'S'));
    s.push(bit(0o004, 'r'));
    s.push(bit(0o002, 'w'));
    s.push(exec(0o001, 0o1000, 't', 'T'));
    s
}

/// A size as `ls -lh` shows it: up to 1023 as is, then one decimal below
/// 10 of a unit (`1.5K`, `9.9M`), whole units above (`10K`, `512G`).
pub fn human_size(n: u64) -> String {
    const UNITS: [char; 6] = ['K', 'M', 'G', 'T', 'P', 'E'];
    if n < 1024 {
        return n.to_string();
    }
    let mut v = n as f64 / 1024.0;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if v < 10.0 {
        // ls rounds up: 1.01K shows as 1.1K.
        let up = (v * 10.0).ceil() / 10.0;
        if up < 10.0 {
            return format!("{up:.1}{}", UNITS[u]);
        }
    }
    format!("{}{}", v.ceil() as u64, UNITS[u])
}

/// The owner's name when the snapshot has it, else the number.
fn owner(name: Option<&String>, id: u32) -> String {
    name.filter(|n| !n.is_empty())
        .cloned()
        .unwrap_or_else(|| id.to_string())
}

/// `ls -l`'s line for `node` at `path`: type and permissions, links, user,
/// group, size (human with `human`), time (UTC), path and a symlink's target.
pub fn long_line(node: &Node, path: &str, human: bool) -> String {
    let size = match node.kind {
        NodeKind::CharDevice | NodeKind::BlockDevice => {
            let (major, minor) = (dev_major(node.rdev), dev_minor(node.rdev));
            format!("{major}, {minor}")
        }
        _ if human => human_size(node.size),
        _ => node.size.to_string(),
    };
    let mut line = format!(
        "{} {:>3} {:<8} {:<8} {:>10} {} {}",
        mode_string(node),
        node.links.max(1),
        owner(node.user.as_ref(), node.uid),
        owner(node.group.as_ref(), node.gid),
        size,
        short_time(node.mtime_ns),
        path
    );
    if let (NodeKind::Symlink, Some(t)) = (node.kind, &node.target) {
        line.push_str(" -> ");
        line.push_str(&String::from_utf8_lossy(t));
    }
    line
}

/// The JSON object of an entry (`message_type` `node`), as documented in
/// docs/cli.md.
pub fn node_json(node: &Node, path: &str) -> Value {
    json!({
        "message_type": "node",
        "path": path,
        "name": String::from_utf8_lossy(&node.name),
        "type": format!("{:?}", node.kind).to_lowercase(),
        "size": node.size,
        "mode": node.mode,
        "permissions": mode_string(node),
        "uid": node.uid,
        "gid": node.gid,
        "user": node.user,
        "group": node.group,
        "links": node.links,
        "mtime": crate::util::rfc3339(node.mtime_ns),
        "target": node.target.as_ref().map(|t| String::from_utf8_lossy(t).into_owned()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(kind: NodeKind, mode: u32) -> Node {
        let mut n = Node::new(b"x", kind);
        n.mode = mode;
        n
    }

    #[test]
    fn modes_read_as_ls_shows_them() {
        assert_eq!(mode_string(&node(NodeKind::Dir, 0o40755)), "drwxr-xr-x");
        assert_eq!(mode_string(&node(NodeKind::File, 0o100644)), "-rw-r--r--");
        assert_eq!(mode_string(&node(NodeKind::File, 0o104755)), "-rwsr-xr-x");
        assert_eq!(mode_string(&node(NodeKind::File, 0o102644)), "-rw-r-Sr--");
        assert_eq!(mode_string(&node(NodeKind::Dir, 0o41777)), "drwxrwxrwt");
        assert_eq!(mode_string(&node(NodeKind::Dir, 0o41770)), "drwxrwx--T");
        assert_eq!(
            mode_string(&node(NodeKind::Symlink, 0o120777)),
            "lrwxrwxrwx"
        );
        assert_eq!(mode_string(&node(NodeKind::Fifo, 0o10600)), "prw-------");
    }

    #[test]
    fn sizes_read_as_ls_h_shows_them() {
        assert_eq!(human_size(0), "0");
        assert_eq!(human_size(1023), "1023");
        assert_eq!(human_size(1024), "1.0K");
        assert_eq!(human_size(1025), "1.1K");
        assert_eq!(human_size(1536), "1.5K");
        assert_eq!(human_size(10 * 1024), "10K");
        assert_eq!(human_size(10 * 1024 + 1), "11K");
        assert_eq!(human_size(5 * 1024 * 1024 * 1024), "5.0G");
    }
}
