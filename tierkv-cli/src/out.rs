//! Output: lines for people (printed as they come), or one JSON document
//! (`--json`, printed at the end). Notes go to stderr, for people only.

use std::io::Write;

use serde_json::Value;

/// How keys and values are shown.
#[derive(Debug, Clone, Copy)]
pub struct Fmt {
    /// Hexadecimal instead of escaped text.
    pub hex: bool,
}

impl Fmt {
    /// `b` as hex, or as text with non-printable bytes escaped (`\xNN`).
    pub fn bytes(&self, b: &[u8]) -> String {
        if self.hex {
            b.iter().map(|x| format!("{x:02x}")).collect()
        } else {
            tierkv::inspect::escape(b)
        }
    }

    /// As [`Fmt::bytes`], cut after `max` bytes (with the full length).
    pub fn cut(&self, b: &[u8], max: usize) -> String {
        if b.len() <= max {
            self.bytes(b)
        } else {
            format!("{}… ({} bytes)", self.bytes(&b[..max]), b.len())
        }
    }
}

/// Where a command's output goes.
pub struct Output {
    json_mode: bool,
    json: Option<Value>,
    stdout: std::io::StdoutLock<'static>,
}

impl Output {
    /// Output in JSON (`json_mode`) or text.
    pub fn new(json_mode: bool) -> Output {
        Output {
            json_mode,
            json: None,
            stdout: std::io::stdout().lock(),
        }
    }

    /// A line of text output.
    pub fn line(&mut self, s: &str) {
        if !self.json_mode {
            // A closed pipe (`| head`) ends the output, not the tool.
            let _ = writeln!(self.stdout, "{s}");
        }
    }

    /// Text output as it is (several lines).
    pub fn text(&mut self, s: &str) {
        if !self.json_mode {
            let _ = write!(self.stdout, "{s}");
        }
    }

    /// A remark for people, on stderr (not in JSON mode).
    pub fn note(&mut self, s: &str) {
        if !self.json_mode {
            eprintln!("{s}");
        }
    }

    /// The JSON document of the command.
    pub fn json(&mut self, v: Value) {
        self.json = Some(v);
    }

    /// Prints the JSON document (JSON mode) and flushes.
    pub fn finish(&mut self) {
        if self.json_mode {
            if let Some(v) = &self.json {
                let text = serde_json::to_string_pretty(v).unwrap_or_else(|_| "null".into());
                let _ = writeln!(self.stdout, "{text}");
            }
        }
        let _ = self.stdout.flush();
    }
}
