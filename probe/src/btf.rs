//! A minimal reader of kernel BTF (`/sys/kernel/btf/vmlinux`): struct member offsets and enum
//! values. The raw tracepoints pass kernel objects (`struct request *`, `struct
//! task_struct *`); without CO-RE in Rust eBPF, the programs read their fields at offsets
//! found here at start-up, so nothing kernel-version specific is compiled in.

use std::collections::HashMap;

use thiserror::Error;

#[derive(Debug, Error, PartialEq, Eq)]
pub enum BtfError {
    #[error("not BTF data (bad magic or header)")]
    BadHeader,
    #[error("BTF data is truncated")]
    Truncated,
    #[error("unknown BTF kind {0}")]
    UnknownKind(u32),
    #[error("no struct {0} in the kernel's BTF")]
    NoStruct(String),
    #[error("struct {0} has no member {1}")]
    NoMember(String, String),
    #[error("no enum value {0} in the kernel's BTF")]
    NoEnumValue(String),
    #[error("no raw tracepoint {0} in the kernel's BTF (no btf_trace_{0})")]
    NoTracepoint(String),
    #[error("no function {0} in the kernel's BTF")]
    NoFunction(String),
    #[cfg(test)]
    #[error("raw tracepoint {0}: argument {1} is not a pointer to a struct")]
    NotAStructPointer(String, usize),
}

const KIND_INT: u32 = 1;
const KIND_PTR: u32 = 2;
const KIND_ARRAY: u32 = 3;
const KIND_STRUCT: u32 = 4;
const KIND_UNION: u32 = 5;
const KIND_ENUM: u32 = 6;
const KIND_FWD: u32 = 7;
const KIND_TYPEDEF: u32 = 8;
const KIND_VOLATILE: u32 = 9;
const KIND_CONST: u32 = 10;
const KIND_RESTRICT: u32 = 11;
const KIND_FUNC: u32 = 12;
const KIND_FUNC_PROTO: u32 = 13;
const KIND_VAR: u32 = 14;
const KIND_DATASEC: u32 = 15;
const KIND_FLOAT: u32 = 16;
const KIND_DECL_TAG: u32 = 17;
const KIND_TYPE_TAG: u32 = 18;
const KIND_ENUM64: u32 = 19;

#[derive(Clone, Debug)]
struct Member {
    name: u32,
    type_id: u32,
    /// Bit offset within the struct.
    bit_offset: u32,
}

#[derive(Clone, Debug)]
enum Type {
    /// An integer of this many bytes.
    Int(u32),
    Composite {
        members: Vec<Member>,
        /// Its name (0: anonymous).
        name: u32,
        size: u32,
    },
    /// A pointer to this type.
    Ptr(u32),
    Array {
        elem: u32,
        len: u32,
    },
    /// A function prototype: its parameters' types are `params[start..start + len]`, their
    /// names `param_names[start..start + len]`.
    FuncProto {
        start: usize,
        len: usize,
    },
    /// Typedef, const, volatile, restrict, type tag: a name for another type.
    Alias(u32),
    Other,
}

/// Parsed kernel BTF: struct layouts and enum values by name.
pub struct Btf {
    strings: Vec<u8>,
    /// Index = type id (0 is void).
    types: Vec<Type>,
    structs: HashMap<String, u32>,
    enum_values: HashMap<String, i64>,
    /// Parameter types of every function prototype, one after the other.
    params: Vec<u32>,
    /// Their names (string offsets; 0 where the prototype does not name them).
    param_names: Vec<u32>,
    /// `btf_trace_<tracepoint>` typedefs: the raw tracepoints' prototypes.
    tracepoints: HashMap<String, u32>,
    /// Names of integer and typedef types, by id (for [`Param::ty`]).
    type_names: HashMap<u32, u32>,
    /// `__bpf_trace_<tracepoint>` functions: the same prototypes, with parameter names
    /// (where the kernel's BTF has them: 6.1 and later, here).
    tracepoint_funcs: HashMap<String, u32>,
    /// Every function: its name (a string offset) and prototype; searched, not indexed, as
    /// only a few are asked for.
    functions: Vec<(u32, u32)>,
    /// Types and string bytes of the base (vmlinux) BTF: a module's split BTF numbers its
    /// types and strings after them.
    base_types: u32,
    base_strings: u32,
}

/// One argument of a raw tracepoint, as BTF describes it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Param {
    /// The parameter's name, where BTF has it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Its type, in C: `struct request *`, `int`, `unsigned long`, `void *`, `bool`.
    pub ty: String,
    /// Its size in bytes (pointers 8; 0 where unknown).
    pub size: u32,
}

/// Where a module's split BTF goes: its ids and string offsets past the base's are moved
/// past everything added before it.
#[derive(Clone, Copy)]
struct Shift {
    base_types: u32,
    types: u32,
    base_strings: u32,
    strings: u32,
}

impl Shift {
    fn ty(self, id: u32) -> u32 {
        if id >= self.base_types {
            id - self.base_types + self.types
        } else {
            id
        }
    }

    fn string(self, offset: u32) -> u32 {
        if offset >= self.base_strings {
            offset - self.base_strings + self.strings
        } else {
            offset
        }
    }
}

fn u32_at(data: &[u8], at: usize) -> Result<u32, BtfError> {
    data.get(at..at + 4)
        .map(|b| u32::from_le_bytes(b.try_into().unwrap_or_default()))
        .ok_or(BtfError::Truncated)
}

impl Btf {
    pub fn from_sys_fs() -> Result<Self, String> {
        let data = std::fs::read("/sys/kernel/btf/vmlinux")
            .map_err(|e| format!("cannot read /sys/kernel/btf/vmlinux: {e}"))?;
        Self::parse(&data).map_err(|e| format!("/sys/kernel/btf/vmlinux: {e}"))
    }

    pub fn parse(data: &[u8]) -> Result<Self, BtfError> {
        if data.len() < 24 || data[..2] != [0x9f, 0xeb] {
            return Err(BtfError::BadHeader);
        }
        let hdr_len = u32_at(data, 4)? as usize;
        let type_off = u32_at(data, 8)? as usize;
        let type_len = u32_at(data, 12)? as usize;
        let str_off = u32_at(data, 16)? as usize;
        let str_len = u32_at(data, 20)? as usize;
        let types_data = data
            .get(hdr_len + type_off..hdr_len + type_off + type_len)
            .ok_or(BtfError::Truncated)?;
        let strings = data
            .get(hdr_len + str_off..hdr_len + str_off + str_len)
            .ok_or(BtfError::Truncated)?
            .to_vec();
        let mut btf = Self {
            strings,
            types: vec![Type::Other],
            structs: HashMap::new(),
            enum_values: HashMap::new(),
            params: Vec::new(),
            param_names: Vec::new(),
            tracepoints: HashMap::new(),
            tracepoint_funcs: HashMap::new(),
            functions: Vec::new(),
            type_names: HashMap::new(),
            base_types: 0,
            base_strings: 0,
        };
        btf.add_types(types_data, None)?;
        btf.base_types = u32::try_from(btf.types.len()).unwrap_or(u32::MAX);
        btf.base_strings = u32::try_from(btf.strings.len()).unwrap_or(u32::MAX);
        Ok(btf)
    }

    /// Adds a module's split BTF (`/sys/kernel/btf/<module>`). Its type ids and string
    /// offsets continue the base's, as every module's do: they are moved past the modules
    /// added before it.
    pub fn add_split(&mut self, data: &[u8]) -> Result<(), BtfError> {
        if data.len() < 24 || data[..2] != [0x9f, 0xeb] {
            return Err(BtfError::BadHeader);
        }
        let hdr_len = u32_at(data, 4)? as usize;
        let type_off = u32_at(data, 8)? as usize;
        let type_len = u32_at(data, 12)? as usize;
        let str_off = u32_at(data, 16)? as usize;
        let str_len = u32_at(data, 20)? as usize;
        let types_data = data
            .get(hdr_len + type_off..hdr_len + type_off + type_len)
            .ok_or(BtfError::Truncated)?;
        let strings = data
            .get(hdr_len + str_off..hdr_len + str_off + str_len)
            .ok_or(BtfError::Truncated)?;
        let shift = Shift {
            base_types: self.base_types,
            types: u32::try_from(self.types.len()).unwrap_or(u32::MAX),
            base_strings: self.base_strings,
            strings: u32::try_from(self.strings.len()).unwrap_or(u32::MAX),
        };
        self.strings.extend_from_slice(strings);
        self.add_types(types_data, Some(shift))
    }

    /// The kernel's BTF with the split BTF of every loaded module that has one (the
    /// filesystems' tracepoints and structs live in theirs where they are modules). A module
    /// whose BTF does not parse is left out.
    pub fn from_sys_fs_with_modules() -> Result<Self, String> {
        let mut btf = Self::from_sys_fs()?;
        let Ok(dir) = std::fs::read_dir("/sys/kernel/btf") else {
            return Ok(btf);
        };
        let mut modules: Vec<_> = dir
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.file_name().is_some_and(|n| n != "vmlinux"))
            .collect();
        modules.sort();
        for path in modules {
            if let Ok(data) = std::fs::read(&path) {
                let _ = btf.add_split(&data);
            }
        }
        Ok(btf)
    }

    fn add_types(&mut self, types_data: &[u8], shift: Option<Shift>) -> Result<(), BtfError> {
        let btf = self;
        let ty = |id: u32| shift.map_or(id, |s| s.ty(id));
        let st = |offset: u32| shift.map_or(offset, |s| s.string(offset));
        let mut at = 0;
        while at < types_data.len() {
            let name = st(u32_at(types_data, at)?);
            let info = u32_at(types_data, at + 4)?;
            let size_or_type = u32_at(types_data, at + 8)?;
            at += 12;
            let vlen = (info & 0xffff) as usize;
            let kind = (info >> 24) & 0x1f;
            let kind_flag = info >> 31 == 1;
            let id = u32::try_from(btf.types.len()).unwrap_or(u32::MAX);
            if matches!(kind, KIND_INT | KIND_TYPEDEF) && name != 0 {
                btf.type_names.insert(id, name);
            }
            let ty = match kind {
                KIND_INT => {
                    at += 4;
                    Type::Int(size_or_type)
                }
                KIND_PTR => Type::Ptr(ty(size_or_type)),
                KIND_FUNC => {
                    if let Some(tracepoint) = btf.string(name).strip_prefix("__bpf_trace_") {
                        btf.tracepoint_funcs
                            .insert(tracepoint.to_string(), ty(size_or_type));
                    }
                    btf.functions.push((name, ty(size_or_type)));
                    Type::Other
                }
                KIND_FWD | KIND_FLOAT => Type::Other,
                KIND_TYPEDEF | KIND_VOLATILE | KIND_CONST | KIND_RESTRICT | KIND_TYPE_TAG => {
                    if kind == KIND_TYPEDEF
                        && let Some(tracepoint) = btf.string(name).strip_prefix("btf_trace_")
                    {
                        btf.tracepoints.insert(tracepoint.to_string(), id);
                    }
                    Type::Alias(ty(size_or_type))
                }
                KIND_ARRAY => {
                    let elem = ty(u32_at(types_data, at)?);
                    let len = u32_at(types_data, at + 8)?;
                    at += 12;
                    Type::Array { elem, len }
                }
                KIND_STRUCT | KIND_UNION => {
                    let mut members = Vec::with_capacity(vlen);
                    for _ in 0..vlen {
                        let offset = u32_at(types_data, at + 8)?;
                        members.push(Member {
                            name: st(u32_at(types_data, at)?),
                            type_id: ty(u32_at(types_data, at + 4)?),
                            // With kind_flag, the high 8 bits hold a bitfield's size.
                            bit_offset: if kind_flag {
                                offset & 0x00ff_ffff
                            } else {
                                offset
                            },
                        });
                        at += 12;
                    }
                    if kind == KIND_STRUCT && name != 0 {
                        let name = btf.string(name).to_string();
                        btf.structs.entry(name).or_insert(id);
                    }
                    Type::Composite {
                        members,
                        name,
                        size: size_or_type,
                    }
                }
                KIND_ENUM => {
                    for _ in 0..vlen {
                        let value = i64::from(u32_at(types_data, at + 4)? as i32);
                        let name = btf.string(st(u32_at(types_data, at)?)).to_string();
                        btf.enum_values.entry(name).or_insert(value);
                        at += 8;
                    }
                    Type::Other
                }
                KIND_ENUM64 => {
                    for _ in 0..vlen {
                        let lo = u64::from(u32_at(types_data, at + 4)?);
                        let hi = u64::from(u32_at(types_data, at + 8)?);
                        let name = btf.string(st(u32_at(types_data, at)?)).to_string();
                        btf.enum_values
                            .entry(name)
                            .or_insert((hi << 32 | lo) as i64);
                        at += 12;
                    }
                    Type::Other
                }
                KIND_FUNC_PROTO => {
                    let start = btf.params.len();
                    for i in 0..vlen {
                        btf.param_names.push(st(u32_at(types_data, at + 8 * i)?));
                        btf.params.push(ty(u32_at(types_data, at + 8 * i + 4)?));
                    }
                    at += 8 * vlen;
                    Type::FuncProto { start, len: vlen }
                }
                KIND_VAR | KIND_DECL_TAG => {
                    at += 4;
                    Type::Other
                }
                KIND_DATASEC => {
                    at += 12 * vlen;
                    Type::Other
                }
                other => return Err(BtfError::UnknownKind(other)),
            };
            btf.types.push(ty);
        }
        Ok(())
    }

    fn string(&self, offset: u32) -> &str {
        let start = offset as usize;
        let end = self.strings[start.min(self.strings.len())..]
            .iter()
            .position(|&b| b == 0)
            .map_or(self.strings.len(), |n| start + n);
        std::str::from_utf8(&self.strings[start.min(end)..end]).unwrap_or("")
    }

    fn resolve(&self, mut id: u32) -> u32 {
        for _ in 0..32 {
            match self.types.get(id as usize) {
                Some(Type::Alias(target)) => id = *target,
                _ => break,
            }
        }
        id
    }

    /// Byte offset of `strukt.member`, looking into anonymous unions and structs.
    #[cfg(test)]
    pub fn member_offset(&self, strukt: &str, member: &str) -> Result<u32, BtfError> {
        self.member_bit_offset(strukt, member).map(|bits| bits / 8)
    }

    /// Bit offset of `strukt.member` (a bitfield's own bit), as `Btf::member_offset`.
    pub fn member_bit_offset(&self, strukt: &str, member: &str) -> Result<u32, BtfError> {
        let id = *self
            .structs
            .get(strukt)
            .ok_or_else(|| BtfError::NoStruct(strukt.to_string()))?;
        self.find_member(id, member, 0)
            .ok_or_else(|| BtfError::NoMember(strukt.to_string(), member.to_string()))
    }

    fn find_member(&self, id: u32, member: &str, base_bits: u32) -> Option<u32> {
        self.find_member_typed(id, member, base_bits)
            .map(|(bits, _)| bits)
    }

    /// The bit offset and the type of `member` of the composite `id`.
    fn find_member_typed(&self, id: u32, member: &str, base_bits: u32) -> Option<(u32, u32)> {
        let Type::Composite { members, .. } = self.types.get(id as usize)? else {
            return None;
        };
        for m in members {
            if m.name != 0 && self.string(m.name) == member {
                return Some((base_bits + m.bit_offset, m.type_id));
            }
        }
        // Anonymous members: their fields are reachable by name from the outer struct.
        members.iter().filter(|m| m.name == 0).find_map(|m| {
            self.find_member_typed(self.resolve(m.type_id), member, base_bits + m.bit_offset)
        })
    }

    /// Size in bytes of `strukt.member`.
    pub fn member_size(&self, strukt: &str, member: &str) -> Result<u32, BtfError> {
        let id = *self
            .structs
            .get(strukt)
            .ok_or_else(|| BtfError::NoStruct(strukt.to_string()))?;
        let (_, ty) = self
            .find_member_typed(id, member, 0)
            .ok_or_else(|| BtfError::NoMember(strukt.to_string(), member.to_string()))?;
        Ok(self.size_of(ty))
    }

    /// Size in bytes of type `id` (0 where BTF does not say).
    fn size_of(&self, id: u32) -> u32 {
        match self.types.get(self.resolve(id) as usize) {
            Some(Type::Int(size)) => *size,
            Some(Type::Ptr(_)) => 8,
            Some(Type::Composite { size, .. }) => *size,
            Some(Type::Array { elem, len }) => self.size_of(*elem).saturating_mul(*len),
            _ => 0,
        }
    }

    /// Type `id` in C, as far as the probes care: `struct request *`, `void *`, `int`.
    fn c_type(&self, id: u32) -> String {
        match self.types.get(id as usize) {
            None => "void".to_string(),
            Some(Type::Alias(target)) => match self.type_names.get(&id) {
                Some(&name) => self.string(name).to_string(),
                None => self.c_type(*target),
            },
            Some(Type::Int(_)) => self
                .type_names
                .get(&id)
                .map_or("int?".to_string(), |&n| self.string(n).to_string()),
            Some(Type::Ptr(target)) => format!("{} *", self.c_type(*target)),
            Some(Type::Composite { name: 0, .. }) => "struct (anon)".to_string(),
            Some(Type::Composite { name, .. }) => format!("struct {}", self.string(*name)),
            Some(Type::Array { elem, len }) => format!("{}[{len}]", self.c_type(*elem)),
            Some(Type::FuncProto { .. }) => "fn".to_string(),
            Some(Type::Other) => "?".to_string(),
        }
    }

    /// The arguments raw tracepoint `tracepoint` passes a program, from its
    /// `btf_trace_<tracepoint>` prototype (whose first parameter, the context, is not one),
    /// named from `__bpf_trace_<tracepoint>` where BTF has that function.
    pub fn raw_tracepoint_params(&self, tracepoint: &str) -> Result<Vec<Param>, BtfError> {
        let missing = || BtfError::NoTracepoint(tracepoint.to_string());
        let typedef = *self.tracepoints.get(tracepoint).ok_or_else(missing)?;
        let Some(Type::Ptr(proto)) = self.types.get(self.resolve(typedef) as usize) else {
            return Err(missing());
        };
        let Some(&Type::FuncProto { start, len }) = self.types.get(self.resolve(*proto) as usize)
        else {
            return Err(missing());
        };
        let names = self.tracepoint_funcs.get(tracepoint).and_then(|&id| {
            match self.types.get(self.resolve(id) as usize) {
                Some(&Type::FuncProto { start: s, len: l }) if l == len => Some(s),
                _ => None,
            }
        });
        Ok((1..len)
            .map(|i| {
                let ty = self.params[start + i];
                Param {
                    name: names
                        .map(|s| self.param_names[s + i])
                        .filter(|&n| n != 0)
                        .map(|n| self.string(n).to_string()),
                    ty: self.c_type(ty),
                    size: self.size_of(ty),
                }
            })
            .collect())
    }

    /// The struct that raw tracepoint `tracepoint`'s argument `arg` (0: the first argument
    /// a raw tracepoint program sees) points to, from its `btf_trace_<tracepoint>` prototype
    /// (whose first parameter is the context, not an argument).
    #[cfg(test)]
    pub fn raw_tracepoint_arg_struct(
        &self,
        tracepoint: &str,
        arg: usize,
    ) -> Result<String, BtfError> {
        let missing = || BtfError::NoTracepoint(tracepoint.to_string());
        let not_struct = || BtfError::NotAStructPointer(tracepoint.to_string(), arg);
        let typedef = *self.tracepoints.get(tracepoint).ok_or_else(missing)?;
        let Some(Type::Ptr(proto)) = self.types.get(self.resolve(typedef) as usize) else {
            return Err(missing());
        };
        let Some(&Type::FuncProto { start, len }) = self.types.get(self.resolve(*proto) as usize)
        else {
            return Err(missing());
        };
        if arg + 1 >= len {
            return Err(not_struct());
        }
        let Some(Type::Ptr(target)) = self
            .types
            .get(self.resolve(self.params[start + arg + 1]) as usize)
        else {
            return Err(not_struct());
        };
        match self.types.get(self.resolve(*target) as usize) {
            Some(Type::Composite { name, .. }) if *name != 0 => Ok(self.string(*name).to_string()),
            _ => Err(not_struct()),
        }
    }

    /// How many arguments raw tracepoint `tracepoint` passes (its prototype's parameters but
    /// the context).
    #[cfg(test)]
    pub fn raw_tracepoint_arg_count(&self, tracepoint: &str) -> Result<usize, BtfError> {
        let missing = || BtfError::NoTracepoint(tracepoint.to_string());
        let typedef = *self.tracepoints.get(tracepoint).ok_or_else(missing)?;
        let Some(Type::Ptr(proto)) = self.types.get(self.resolve(typedef) as usize) else {
            return Err(missing());
        };
        let Some(&Type::FuncProto { len, .. }) = self.types.get(self.resolve(*proto) as usize)
        else {
            return Err(missing());
        };
        Ok(len.saturating_sub(1))
    }

    /// The parameters of kernel function `name` (what a trampoline's program is passed).
    pub fn function_params(&self, name: &str) -> Result<Vec<Param>, BtfError> {
        let missing = || BtfError::NoFunction(name.to_string());
        let &(_, proto) = (self.functions.iter())
            .find(|&&(n, _)| self.string(n) == name)
            .ok_or_else(missing)?;
        let Some(&Type::FuncProto { start, len }) = self.types.get(self.resolve(proto) as usize)
        else {
            return Err(missing());
        };
        Ok((start..start + len)
            .map(|i| Param {
                name: Some(self.param_names[i])
                    .filter(|&n| n != 0)
                    .map(|n| self.string(n).to_string()),
                ty: self.c_type(self.params[i]),
                size: self.size_of(self.params[i]),
            })
            .collect())
    }

    pub fn enum_value(&self, name: &str) -> Result<i64, BtfError> {
        self.enum_values
            .get(name)
            .copied()
            .ok_or_else(|| BtfError::NoEnumValue(name.to_string()))
    }
}

#[cfg(test)]
pub(crate) mod tests;
