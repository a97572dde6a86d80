//! What the feedback stories share: the corpus of real-world-shaped reports
//! under `tests/feedback/corpus`, and filling one in for a given email.

pub const CORPUS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/feedback/corpus");

/// The corpus files, sorted.
pub fn corpus() -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<_> = std::fs::read_dir(CORPUS)
        .expect("corpus directory")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "eml"))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let name = p.file_stem().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(&p).unwrap())
        })
        .collect()
}

/// A corpus message about one email: its placeholders filled in, every
/// other byte (8-bit ones too) kept as it is.
pub fn fill(template: &[u8], return_path: &str, message_id: &str, recipients: &[&str]) -> Vec<u8> {
    let values = [
        ("{{return_path}}", return_path),
        ("{{message_id}}", message_id),
        ("{{recipient}}", recipients[0]),
        (
            "{{recipient2}}",
            recipients.get(1).unwrap_or(&recipients[0]),
        ),
    ];
    let mut out = Vec::with_capacity(template.len());
    let mut rest = template;
    'bytes: while !rest.is_empty() {
        for (name, value) in values {
            if let Some(after) = rest.strip_prefix(name.as_bytes()) {
                out.extend_from_slice(value.as_bytes());
                rest = after;
                continue 'bytes;
            }
        }
        out.push(rest[0]);
        rest = &rest[1..];
    }
    out
}
