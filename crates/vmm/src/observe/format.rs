//! A tracepoint's `format` file (tracefs `events/<system>/<name>/format`),
//! read as perf and libtraceevent read it: each field's offset, size and
//! signedness come from the file, never from offsets written into dirq, so
//! a kernel that moves a field is decoded right or refused by name. The
//! `print fmt` line's `__print_symbolic` tables give the names the kernel
//! itself prints (e.g. kvm_exit's VMX and SVM exit reasons).

use std::collections::BTreeMap;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FormatError {
    #[error("the format file has no `{0}` line")]
    Missing(&'static str),
    #[error("the format file's line {line} is not a field: {text}")]
    BadField { line: usize, text: String },
}

/// One field of a tracepoint record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Field {
    pub name: String,
    pub offset: usize,
    pub size: usize,
    pub signed: bool,
}

impl Field {
    /// The field's value, zero-extended (or sign-extended where the format
    /// says signed) to 64 bits; `None` if the record is too short or the
    /// field is an array wider than 8 bytes.
    pub fn value(&self, record: &[u8]) -> Option<u64> {
        let bytes = record.get(self.offset..self.offset.checked_add(self.size)?)?;
        let mut word = [0u8; 8];
        word.get_mut(..bytes.len())?.copy_from_slice(bytes);
        let raw = u64::from_le_bytes(word);
        let bits = u32::try_from(self.size * 8).ok()?;
        if self.signed && bits < 64 && raw >> (bits - 1) & 1 == 1 {
            Some(raw | !0u64 << bits)
        } else {
            Some(raw)
        }
    }

    /// The field's bytes (an array such as kvm_emulate_insn's `insn`).
    pub fn bytes<'a>(&self, record: &'a [u8]) -> Option<&'a [u8]> {
        record.get(self.offset..self.offset.checked_add(self.size)?)
    }
}

/// One `__print_symbolic(expression, { value, "name" }, ...)` table of the
/// print fmt line, in the order the line gives them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SymbolTable {
    /// The expression the table names (`REC->exit_reason & 0xffff`).
    pub expression: String,
    pub names: BTreeMap<u64, String>,
}

/// A parsed format file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventFormat {
    pub name: String,
    /// The tracepoint's id: perf's `config` for PERF_TYPE_TRACEPOINT and
    /// the record's `common_type`.
    pub id: u64,
    pub fields: Vec<Field>,
    pub symbols: Vec<SymbolTable>,
}

impl EventFormat {
    pub fn parse(text: &str) -> Result<EventFormat, FormatError> {
        let value_of = |key: &str| {
            text.lines()
                .find_map(|line| line.strip_prefix(key).map(|rest| rest.trim().to_string()))
        };
        let name = value_of("name:").ok_or(FormatError::Missing("name"))?;
        let id = value_of("ID:")
            .and_then(|id| id.parse().ok())
            .ok_or(FormatError::Missing("ID"))?;
        let mut fields = Vec::new();
        for (index, line) in text.lines().enumerate() {
            let line = line.trim();
            if !line.starts_with("field:") {
                continue;
            }
            fields.push(parse_field(line).ok_or_else(|| FormatError::BadField {
                line: index + 1,
                text: line.to_string(),
            })?);
        }
        let symbols = value_of("print fmt:")
            .map(|print| symbol_tables(&print))
            .unwrap_or_default();
        Ok(EventFormat {
            name,
            id,
            fields,
            symbols,
        })
    }

    pub fn field(&self, name: &str) -> Option<&Field> {
        self.fields.iter().find(|field| field.name == name)
    }
}

/// `field:unsigned int vcpu_id;\toffset:8;\tsize:4;\tsigned:0;`
fn parse_field(line: &str) -> Option<Field> {
    let mut parts = line.split(';').map(str::trim);
    let declaration = parts.next()?.strip_prefix("field:")?;
    let mut attribute =
        |key: &str| -> Option<usize> { parts.next()?.strip_prefix(key)?.trim().parse().ok() };
    let offset = attribute("offset:")?;
    let size = attribute("size:")?;
    let signed = attribute("signed:")? != 0;
    // The name is the declaration's last word, without an array suffix
    // (`__u8 insn[15]`, `__data_loc char[] name`).
    let last = declaration.split_whitespace().last()?;
    let name = last.split('[').next()?.to_string();
    Some(Field {
        name,
        offset,
        size,
        signed,
    })
}

/// Every `__print_symbolic(...)` table of a print fmt line.
fn symbol_tables(print: &str) -> Vec<SymbolTable> {
    const START: &str = "__print_symbolic(";
    let mut tables = Vec::new();
    let mut rest = print;
    while let Some(at) = rest.find(START) {
        rest = &rest[at + START.len()..];
        let Some(body) = balanced(rest) else { break };
        let expression = body.split(',').next().unwrap_or("").trim().to_string();
        let names = body
            .split('{')
            .skip(1)
            .filter_map(|entry| {
                let entry = entry.split('}').next()?;
                let (value, name) = entry.split_once(',')?;
                Some((evaluate(value.trim())?, string_literal(name)?))
            })
            .collect();
        tables.push(SymbolTable { expression, names });
        rest = &rest[body.len()..];
    }
    tables
}

/// The text up to the parenthesis that closes one already opened.
fn balanced(text: &str) -> Option<&str> {
    let mut depth = 1usize;
    let mut in_string = false;
    for (index, character) in text.char_indices() {
        match character {
            '"' => in_string = !in_string,
            '(' if !in_string => depth += 1,
            ')' if !in_string => {
                depth -= 1;
                if depth == 0 {
                    return Some(&text[..index]);
                }
            }
            _ => {}
        }
    }
    None
}

/// C's adjacent string literals, concatenated (`"KVM_EXIT_" "IO"`).
fn string_literal(text: &str) -> Option<String> {
    let pieces: Vec<&str> = text.split('"').collect();
    if pieces.len() < 3 {
        return None;
    }
    Some(pieces.iter().skip(1).step_by(2).copied().collect())
}

/// The constant expressions symbol tables use: numbers (decimal or hex,
/// possibly negative), parentheses, `<<`, `|` and `+`.
fn evaluate(text: &str) -> Option<u64> {
    let tokens = tokenize(text)?;
    let mut position = 0;
    let value = parse_or(&tokens, &mut position)?;
    (position == tokens.len()).then_some(value)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Token {
    Number(u64),
    Open,
    Close,
    Shift,
    Or,
    Plus,
    Minus,
}

fn tokenize(text: &str) -> Option<Vec<Token>> {
    let mut tokens = Vec::new();
    let mut chars = text.chars().peekable();
    while let Some(&character) = chars.peek() {
        match character {
            ' ' | '\t' => {
                chars.next();
            }
            '(' | ')' | '|' | '+' | '-' => {
                chars.next();
                tokens.push(match character {
                    '(' => Token::Open,
                    ')' => Token::Close,
                    '|' => Token::Or,
                    '+' => Token::Plus,
                    _ => Token::Minus,
                });
            }
            '<' => {
                chars.next();
                (chars.next()? == '<').then_some(())?;
                tokens.push(Token::Shift);
            }
            digit if digit.is_ascii_digit() => {
                let mut literal = String::new();
                while let Some(&next) = chars.peek() {
                    if !next.is_ascii_alphanumeric() {
                        break;
                    }
                    literal.push(next);
                    chars.next();
                }
                let value = match literal
                    .strip_prefix("0x")
                    .or_else(|| literal.strip_prefix("0X"))
                {
                    Some(hex) => u64::from_str_radix(hex, 16).ok()?,
                    None => literal
                        .trim_end_matches(['u', 'U', 'l', 'L'])
                        .parse()
                        .ok()?,
                };
                tokens.push(Token::Number(value));
            }
            _ => return None,
        }
    }
    Some(tokens)
}

fn parse_or(tokens: &[Token], position: &mut usize) -> Option<u64> {
    let mut value = parse_shift(tokens, position)?;
    while tokens.get(*position) == Some(&Token::Or) {
        *position += 1;
        value |= parse_shift(tokens, position)?;
    }
    Some(value)
}

fn parse_shift(tokens: &[Token], position: &mut usize) -> Option<u64> {
    let mut value = parse_sum(tokens, position)?;
    while tokens.get(*position) == Some(&Token::Shift) {
        *position += 1;
        let by = u32::try_from(parse_sum(tokens, position)?).ok()?;
        value = value.checked_shl(by)?;
    }
    Some(value)
}

fn parse_sum(tokens: &[Token], position: &mut usize) -> Option<u64> {
    let mut value = parse_atom(tokens, position)?;
    while tokens.get(*position) == Some(&Token::Plus) {
        *position += 1;
        value = value.wrapping_add(parse_atom(tokens, position)?);
    }
    Some(value)
}

fn parse_atom(tokens: &[Token], position: &mut usize) -> Option<u64> {
    let token = *tokens.get(*position)?;
    *position += 1;
    match token {
        Token::Number(value) => Some(value),
        // `-1` in a table of u32 reasons is the all-ones 32-bit value.
        Token::Minus => Some(u64::from(
            0u32.wrapping_sub(u32::try_from(parse_atom(tokens, position)?).ok()?),
        )),
        Token::Open => {
            let value = parse_or(tokens, position)?;
            (tokens.get(*position) == Some(&Token::Close)).then_some(())?;
            *position += 1;
            Some(value)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KVM_EXIT: &str = include_str!("formats/kvm_exit");
    const EMULATE_INSN: &str = include_str!("formats/kvm_emulate_insn");
    const USERSPACE_EXIT: &str = include_str!("formats/kvm_userspace_exit");

    #[test]
    fn fields_come_from_the_file_with_their_offsets_sizes_and_signedness() {
        let exit = EventFormat::parse(KVM_EXIT).unwrap();
        assert_eq!(exit.name, "kvm_exit");
        assert_eq!(exit.id, 103);
        let rip = exit.field("guest_rip").unwrap();
        assert_eq!((rip.offset, rip.size, rip.signed), (16, 8, false));
        assert!(exit.field("common_pid").unwrap().signed);
        let insn = EventFormat::parse(EMULATE_INSN).unwrap();
        let bytes = insn.field("insn").unwrap();
        assert_eq!((bytes.offset, bytes.size), (21, 15));
    }

    #[test]
    fn values_are_read_little_endian_and_signed_ones_sign_extended() {
        let field = |size, signed| Field {
            name: "x".into(),
            offset: 1,
            size,
            signed,
        };
        let record = [0xAA, 0xFC, 0xFF, 0xFF, 0xFF, 0x01];
        assert_eq!(field(4, true).value(&record), Some((-4i64).cast_unsigned()));
        assert_eq!(field(4, false).value(&record), Some(0xFFFF_FFFC));
        assert_eq!(field(2, false).value(&record), Some(0xFFFC));
        assert_eq!(
            field(8, false).value(&record),
            None,
            "past the record's end"
        );
    }

    #[test]
    fn kvm_exits_print_fmt_gives_the_vmx_and_the_svm_names() {
        let exit = EventFormat::parse(KVM_EXIT).unwrap();
        let [vmx, svm] = exit.symbols.as_slice() else {
            panic!("two tables: {:?}", exit.symbols.len());
        };
        assert!(vmx.expression.contains("0xffff"), "{}", vmx.expression);
        assert_eq!(vmx.names[&1], "EXTERNAL_INTERRUPT");
        assert_eq!(vmx.names[&7], "INTERRUPT_WINDOW");
        assert_eq!(vmx.names[&49], "EPT_MISCONFIG");
        assert_eq!(svm.names[&0x60], "interrupt");
        assert_eq!(svm.names[&(0x40 + 13)], "GP excp");
        assert_eq!(svm.names[&0x401], "avic_incomplete_ipi");
        assert_eq!(svm.names[&0xffff_ffff], "invalid_guest_state");
        assert_eq!(svm.names[&0x8000_0001], "vmgexit_mmio_read");
    }

    #[test]
    fn adjacent_string_literals_join_as_c_joins_them() {
        let exit = EventFormat::parse(USERSPACE_EXIT).unwrap();
        assert_eq!(exit.symbols[0].names[&2], "KVM_EXIT_IO");
        assert_eq!(evaluate("(1 << 0) | (1 << 2)"), Some(5));
        assert_eq!(evaluate("0x040 + 19"), Some(0x53));
        assert_eq!(evaluate("1 <<"), None);
    }

    #[test]
    fn a_file_without_an_id_or_with_a_broken_field_is_refused_by_name() {
        assert_eq!(
            EventFormat::parse("name: x\nformat:\n"),
            Err(FormatError::Missing("ID"))
        );
        let broken = "name: x\nID: 1\nformat:\n\tfield:int a;\toffset:zero;\tsize:4;\tsigned:1;\n";
        assert!(matches!(
            EventFormat::parse(broken),
            Err(FormatError::BadField { line: 4, .. })
        ));
    }
}
