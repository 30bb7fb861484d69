use std::fmt;

/// One metadata value.
#[derive(Debug, Clone, PartialEq)]
pub enum MetaValue {
    /// GGUF type 0.
    U8(u8),
    /// GGUF type 1.
    I8(i8),
    /// GGUF type 2.
    U16(u16),
    /// GGUF type 3.
    I16(i16),
    /// GGUF type 4.
    U32(u32),
    /// GGUF type 5.
    I32(i32),
    /// GGUF type 6.
    F32(f32),
    /// GGUF type 7.
    Bool(bool),
    /// GGUF type 8.
    Str(String),
    /// GGUF type 9.
    Array(MetaArray),
    /// GGUF type 10.
    U64(u64),
    /// GGUF type 11.
    I64(i64),
    /// GGUF type 12.
    F64(f64),
}

/// A metadata array: its elements are all of one type, kept unboxed so that a large array (a
/// vocabulary, a score table) costs little more memory than its bytes in the file.
#[derive(Debug, Clone, PartialEq)]
pub enum MetaArray {
    /// Elements of GGUF type 0.
    U8(Vec<u8>),
    /// Elements of GGUF type 1.
    I8(Vec<i8>),
    /// Elements of GGUF type 2.
    U16(Vec<u16>),
    /// Elements of GGUF type 3.
    I16(Vec<i16>),
    /// Elements of GGUF type 4.
    U32(Vec<u32>),
    /// Elements of GGUF type 5.
    I32(Vec<i32>),
    /// Elements of GGUF type 6.
    F32(Vec<f32>),
    /// Elements of GGUF type 7.
    Bool(Vec<bool>),
    /// Elements of GGUF type 8.
    Str(Vec<String>),
    /// Elements of GGUF type 9: nested arrays, each with its own element type.
    Array(Vec<MetaArray>),
    /// Elements of GGUF type 10.
    U64(Vec<u64>),
    /// Elements of GGUF type 11.
    I64(Vec<i64>),
    /// Elements of GGUF type 12.
    F64(Vec<f64>),
}

impl MetaValue {
    /// The GGUF name of the value's type (`"u32"`, `"string"`, `"array of string"`).
    pub fn type_name(&self) -> String {
        match self {
            MetaValue::U8(_) => "u8".into(),
            MetaValue::I8(_) => "i8".into(),
            MetaValue::U16(_) => "u16".into(),
            MetaValue::I16(_) => "i16".into(),
            MetaValue::U32(_) => "u32".into(),
            MetaValue::I32(_) => "i32".into(),
            MetaValue::F32(_) => "f32".into(),
            MetaValue::Bool(_) => "bool".into(),
            MetaValue::Str(_) => "string".into(),
            MetaValue::Array(a) => format!("array of {}", a.element_type_name()),
            MetaValue::U64(_) => "u64".into(),
            MetaValue::I64(_) => "i64".into(),
            MetaValue::F64(_) => "f64".into(),
        }
    }

    /// The value as a `u64`, if it is an integer of any width that is not negative.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            MetaValue::U8(v) => Some(v.into()),
            MetaValue::U16(v) => Some(v.into()),
            MetaValue::U32(v) => Some(v.into()),
            MetaValue::U64(v) => Some(v),
            MetaValue::I8(v) => u64::try_from(v).ok(),
            MetaValue::I16(v) => u64::try_from(v).ok(),
            MetaValue::I32(v) => u64::try_from(v).ok(),
            MetaValue::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// Whether the value is an integer (of any width and sign).
    pub(super) fn is_integer(&self) -> bool {
        matches!(
            self,
            MetaValue::U8(_)
                | MetaValue::I8(_)
                | MetaValue::U16(_)
                | MetaValue::I16(_)
                | MetaValue::U32(_)
                | MetaValue::I32(_)
                | MetaValue::U64(_)
                | MetaValue::I64(_)
        )
    }
}

impl MetaArray {
    /// The number of elements.
    pub fn len(&self) -> usize {
        match self {
            MetaArray::U8(v) => v.len(),
            MetaArray::I8(v) => v.len(),
            MetaArray::U16(v) => v.len(),
            MetaArray::I16(v) => v.len(),
            MetaArray::U32(v) => v.len(),
            MetaArray::I32(v) => v.len(),
            MetaArray::F32(v) => v.len(),
            MetaArray::Bool(v) => v.len(),
            MetaArray::Str(v) => v.len(),
            MetaArray::Array(v) => v.len(),
            MetaArray::U64(v) => v.len(),
            MetaArray::I64(v) => v.len(),
            MetaArray::F64(v) => v.len(),
        }
    }

    /// Whether the array has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The GGUF name of the element type (`"string"`, `"i32"`, `"array"`).
    pub fn element_type_name(&self) -> &'static str {
        match self {
            MetaArray::U8(_) => "u8",
            MetaArray::I8(_) => "i8",
            MetaArray::U16(_) => "u16",
            MetaArray::I16(_) => "i16",
            MetaArray::U32(_) => "u32",
            MetaArray::I32(_) => "i32",
            MetaArray::F32(_) => "f32",
            MetaArray::Bool(_) => "bool",
            MetaArray::Str(_) => "string",
            MetaArray::Array(_) => "array",
            MetaArray::U64(_) => "u64",
            MetaArray::I64(_) => "i64",
            MetaArray::F64(_) => "f64",
        }
    }
}

/// How many array elements [`fmt::Display`] shows before eliding the rest.
const DISPLAY_ELEMS: usize = 8;

/// Writes up to [`DISPLAY_ELEMS`] items and the total count of the rest.
fn fmt_list<T>(f: &mut fmt::Formatter<'_>, items: &[T], each: impl Fn(&T) -> String) -> fmt::Result {
    let shown: Vec<String> = items.iter().take(DISPLAY_ELEMS).map(each).collect();
    write!(f, "[{}", shown.join(", "))?;
    if items.len() > DISPLAY_ELEMS {
        write!(f, ", ... ({} elements)", items.len())?;
    }
    write!(f, "]")
}

impl fmt::Display for MetaArray {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MetaArray::U8(v) => fmt_list(f, v, |x| x.to_string()),
            MetaArray::I8(v) => fmt_list(f, v, |x| x.to_string()),
            MetaArray::U16(v) => fmt_list(f, v, |x| x.to_string()),
            MetaArray::I16(v) => fmt_list(f, v, |x| x.to_string()),
            MetaArray::U32(v) => fmt_list(f, v, |x| x.to_string()),
            MetaArray::I32(v) => fmt_list(f, v, |x| x.to_string()),
            MetaArray::F32(v) => fmt_list(f, v, |x| x.to_string()),
            MetaArray::Bool(v) => fmt_list(f, v, |x| x.to_string()),
            MetaArray::Str(v) => fmt_list(f, v, |x| format!("{x:?}")),
            MetaArray::Array(v) => fmt_list(f, v, |x| x.to_string()),
            MetaArray::U64(v) => fmt_list(f, v, |x| x.to_string()),
            MetaArray::I64(v) => fmt_list(f, v, |x| x.to_string()),
            MetaArray::F64(v) => fmt_list(f, v, |x| x.to_string()),
        }
    }
}

/// Scalars print plainly, strings quoted, arrays with their first elements and their length.
impl fmt::Display for MetaValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MetaValue::U8(v) => write!(f, "{v}"),
            MetaValue::I8(v) => write!(f, "{v}"),
            MetaValue::U16(v) => write!(f, "{v}"),
            MetaValue::I16(v) => write!(f, "{v}"),
            MetaValue::U32(v) => write!(f, "{v}"),
            MetaValue::I32(v) => write!(f, "{v}"),
            MetaValue::F32(v) => write!(f, "{v}"),
            MetaValue::Bool(v) => write!(f, "{v}"),
            MetaValue::Str(v) => write!(f, "{v:?}"),
            MetaValue::Array(v) => write!(f, "{v}"),
            MetaValue::U64(v) => write!(f, "{v}"),
            MetaValue::I64(v) => write!(f, "{v}"),
            MetaValue::F64(v) => write!(f, "{v}"),
        }
    }
}
