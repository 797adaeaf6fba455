//! What file names tell the heuristic: which extensions are ordinary when a
//! file gains them (compression, backups, rotation), and which names are
//! ransom notes.

/// Extensions of compression and archive formats: a file renamed to one of
/// them (`app.log` -> `app.log.gz`) became incompressible because it was
/// compressed, which says nothing about encryption.
const COMPRESSED: &[&str] = &[
    "gz", "tgz", "xz", "txz", "zst", "zstd", "bz2", "tbz", "tbz2", "lz", "lz4", "lzma", "lzo", "z",
    "zip", "7z", "rar", "br", "sz", "jar", "deb", "rpm", "apk", "cab",
    // Containers that are zip files, and compressed media: converting to
    // them (`.doc` -> `.docx`, `.wav` -> `.flac`) makes content that does
    // not compress.
    "docx", "xlsx", "pptx", "odt", "ods", "odp", "epub", "pdf", "png", "jpg", "jpeg", "gif", "webp",
    "heic", "avif", "mp3", "flac", "ogg", "opus", "m4a", "aac", "mp4", "m4v", "mkv", "mov", "avi",
    "webm",
];

/// Extensions a file gains in the ordinary course of things: editors,
/// package managers and tools keeping the old version aside.
const ORDINARY: &[&str] = &[
    "bak",
    "old",
    "orig",
    "rej",
    "tmp",
    "temp",
    "swp",
    "swo",
    "part",
    "partial",
    "save",
    "new",
    "dist",
    "prev",
    "backup",
    "lock",
    "pid",
    "dpkg-old",
    "dpkg-new",
    "dpkg-dist",
    "dpkg-bak",
    "dpkg-tmp",
    "ucf-old",
    "ucf-new",
    "ucf-dist",
    "pacnew",
    "pacsave",
    "rpmnew",
    "rpmsave",
    "rpmorig",
    "log",
    "txt",
    "sig",
    "asc",
    "sha256",
    "md5",
];

/// Words of ransom notes' names, lower case. A name is a note when one of
/// its words holds a telling stem (`DECRYPT_INSTRUCTIONS.txt`,
/// `RANSOM.html`), or it has both an instruction word and a subject word
/// (`HOW_TO_RECOVER_FILES.txt`, `!!!READ_ME_TO_RESTORE_FILES!!!.html`); a
/// plain `README`, `restore.c` or `help.txt` is not.
const NOTE_TELLING: &[&str] = &["decrypt", "ransom"];
const NOTE_INSTRUCTION: &[&str] = &[
    "how",
    "read",
    "readme",
    "restore",
    "recover",
    "recovery",
    "help",
    "instruction",
    "instructions",
    "attention",
];
const NOTE_SUBJECT: &[&str] = &["files", "file", "data", "encrypted", "locked"];

/// The last extension of `name`, lower case (`"locked"` for
/// `"a.doc.locked"`), if it has one that looks like an extension: 1-16
/// characters, letters, digits, `-` and `_`, after a non-empty stem.
pub fn extension(name: &str) -> Option<(&str, String)> {
    let (stem, ext) = name.rsplit_once('.')?;
    if stem.is_empty()
        || ext.is_empty()
        || ext.len() > 16
        || !ext
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        return None;
    }
    Some((stem, ext.to_ascii_lowercase()))
}

/// True for an extension that explains, alone, why a file's content became
/// incompressible (a compression or archive format).
pub fn is_compressed(ext: &str) -> bool {
    COMPRESSED.contains(&ext)
}

/// True for an extension that files gain without anything being wrong:
/// compression, backups, package managers' leftovers, rotation numbers
/// (`syslog.1`) and dates (`app.log-20261201` has none; `x.20261201` is
/// all digits).
pub fn is_ordinary(ext: &str) -> bool {
    is_compressed(ext) || ORDINARY.contains(&ext) || ext.bytes().all(|b| b.is_ascii_digit())
}

/// Extensions ransom notes come with (or none): text and web pages, not
/// source code (`restore_data.py`, `decrypt.go` are programs).
const NOTE_EXTENSIONS: &[&str] = &[
    "txt", "html", "htm", "hta", "rtf", "url", "png", "bmp", "jpg",
];

/// True if `name` reads like a ransom note.
pub fn is_ransom_note(name: &str) -> bool {
    if extension(name).is_some_and(|(_, e)| !NOTE_EXTENSIONS.contains(&e.as_str())) {
        return false;
    }
    let lower = name.to_ascii_lowercase();
    let words: Vec<&str> = lower
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty())
        .collect();
    let telling = words
        .iter()
        .any(|w| NOTE_TELLING.iter().any(|t| w.contains(t)));
    let instruction = words.iter().any(|w| NOTE_INSTRUCTION.contains(w));
    let subject = words.iter().any(|w| NOTE_SUBJECT.contains(w));
    telling || (instruction && subject)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extensions_are_the_last_dot_part_in_lower_case() {
        assert_eq!(extension("a.doc.LOCKED"), Some(("a.doc", "locked".into())));
        assert_eq!(extension("syslog.1"), Some(("syslog", "1".into())));
        assert_eq!(extension(".bashrc"), None);
        assert_eq!(extension("noext"), None);
        assert_eq!(extension("a.has space"), None);
    }

    #[test]
    fn rotation_compression_and_backups_are_ordinary_a_ransom_extension_is_not() {
        for ext in ["gz", "zst", "1", "12", "bak", "dpkg-old", "rpmnew", "orig"] {
            assert!(is_ordinary(ext), "{ext}");
        }
        for ext in ["locked", "encrypted", "crypt", "wncry", "lockbit", "a1b2c3"] {
            assert!(!is_ordinary(ext), "{ext}");
        }
    }

    #[test]
    fn ransom_notes_are_told_from_readmes() {
        for n in [
            "HOW_TO_DECRYPT.txt",
            "!!!READ_ME_TO_RESTORE_FILES!!!.html",
            "How-To-Recover-Files.txt",
            "RANSOM_NOTE.txt",
            "_readme_files_encrypted.txt",
            "RESTORE-MY-FILES.TXT",
        ] {
            assert!(is_ransom_note(n), "{n}");
        }
        for n in [
            "README",
            "README.md",
            "readme.txt",
            "Makefile",
            "help.txt",
            "restore.c",
            "recovery.rs",
            "datafiles.csv",
            "warning.h",
            "restore_data.py",
            "decrypt.go",
            "read_file.rs",
        ] {
            assert!(!is_ransom_note(n), "{n}");
        }
    }
}
