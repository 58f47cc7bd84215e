//! The bytes of calls multiplexed between two sidecars: frames, batched in
//! the gRPC messages of one long-lived stream (`/tlc.Sidecar/Mux`).
//!
//! Written and read here only; `MUX.md` beside this module describes the
//! format for people. Each direction of a session keeps its own header
//! tables, changed only by the frames it carries in order, so both ends
//! hold the same tables without ever saying so. Every length and count a
//! peer sends is checked against a bound before anything is allocated for
//! it: a hostile peer gets a [`FrameError`], never a panic or unbounded
//! memory.

use std::collections::HashMap;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use thiserror::Error;

/// The gRPC method of the session stream.
pub const PATH: &str = "/tlc.Sidecar/Mux";
/// Bytes of one batch (one gRPC message of the session stream) at most.
pub const MAX_BATCH: usize = 1 << 20;
/// Header pairs in one head or tail at most.
pub const MAX_PAIRS: usize = 64;
/// Bytes of names and values in one head or tail at most.
pub const MAX_BLOCK_BYTES: usize = 32 << 10;
/// Slots of the pair table.
const PAIR_SLOTS: usize = 256;
/// Slots of the name table.
const NAME_SLOTS: usize = 64;
/// A literal pair longer than this (name and value) is not remembered.
const MAX_REMEMBERED: usize = 512;
/// gRPC's message prefix: a flag byte and a big-endian length.
pub const GRPC_PREFIX: usize = 5;

const HEAD: u8 = 0x01;
const DATA: u8 = 0x02;
const END: u8 = 0x04;
const TAIL: u8 = 0x08;
const GRPC: u8 = 0x10;
const SAME_HEAD: u8 = 0x20;
const SAME_TAIL: u8 = 0x40;
const CONTROL: u8 = 0x80;
const RESET: u8 = 0x80;
const CREDIT: u8 = 0x81;
const GOAWAY: u8 = 0x82;

/// A header list as the frames carry it: names (pseudo-headers such as
/// `:path` and `:status` included) and values, in order.
pub type Pairs = Vec<(Bytes, Bytes)>;

/// One frame of a session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// Part of a call: its head, data and end, in any combination that
    /// keeps that order.
    Call(u32, Part),
    /// The call is cancelled; nothing more is sent for it either way.
    Reset(u32, u32),
    /// The receiver of the call's data has consumed this many more bytes.
    Credit(u32, u32),
    /// The sender takes no new call after this frame.
    GoAway,
}

/// Part of one side of a call.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Part {
    /// The head: a request's (`:path` first) or a response's (`:status`).
    pub head: Option<Pairs>,
    /// Body bytes.
    pub data: Option<Bytes>,
    /// `data` is one whole uncompressed gRPC message whose 5-byte prefix
    /// the writer took off; the reader puts it back.
    pub grpc: bool,
    /// This side of the call ends here.
    pub end: bool,
    /// Trailers (only with `end`).
    pub tail: Option<Pairs>,
}

/// Why a peer's bytes are not a session's frames.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum FrameError {
    /// The bytes end inside a frame or a number.
    #[error("the frame is cut short")]
    Short,
    /// A number does not fit in 32 bits.
    #[error("a number is too long")]
    Number,
    /// Flags that mean nothing together, or an unknown control frame.
    #[error("flags {0:#04x} are not a frame")]
    Flags(u8),
    /// A head or tail keeps more of the last one than it had.
    #[error("a header block keeps {keep} of {had} pairs")]
    Keep {
        /// Pairs kept.
        keep: usize,
        /// Pairs the last block had.
        had: usize,
    },
    /// A header block over [`MAX_PAIRS`] or [`MAX_BLOCK_BYTES`].
    #[error("a header block is too large")]
    BlockTooLarge,
    /// An index into a table slot that holds nothing.
    #[error("header table slot {0} is empty")]
    Slot(u64),
    /// A gRPC message of the session stream that is compressed or over
    /// [`MAX_BATCH`].
    #[error("a batch of {0} bytes (flag {1}) is not taken")]
    Batch(usize, u8),
}

/// What of a written frame was header blocks and body bytes; the rest of
/// it (flags, id, lengths) is framing.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Written {
    /// Bytes of head and tail blocks.
    pub headers: usize,
    /// Body bytes.
    pub data: usize,
}

/// The header tables of one direction of a session: the writer's and the
/// reader's are the same as long as every frame is read in the order it
/// was written.
#[derive(Debug, Default)]
pub struct Tables {
    dictionary: Dictionary,
    last_head: Pairs,
    last_tail: Pairs,
}

/// The pairs and names written literally lately, by slot.
#[derive(Debug, Default)]
struct Dictionary {
    pairs: Ring<(Bytes, Bytes)>,
    names: Ring<Bytes>,
}

/// A table of `N` slots filled in turn, the oldest entry replaced, with an
/// index from entry to slot for the writer.
#[derive(Debug)]
struct Ring<T> {
    slots: Vec<T>,
    next: usize,
    capacity: usize,
    index: HashMap<T, usize>,
}

impl<T: Clone + Eq + std::hash::Hash> Ring<T> {
    fn with(capacity: usize) -> Self {
        Ring {
            slots: Vec::new(),
            next: 0,
            capacity,
            index: HashMap::new(),
        }
    }

    fn insert(&mut self, value: T) {
        let slot = self.next;
        self.next = (self.next + 1) % self.capacity;
        if slot < self.slots.len() {
            let old = std::mem::replace(&mut self.slots[slot], value.clone());
            if self.index.get(&old) == Some(&slot) {
                self.index.remove(&old);
            }
        } else {
            self.slots.push(value.clone());
        }
        self.index.insert(value, slot);
    }

    fn get(&self, slot: u64) -> Result<&T, FrameError> {
        usize::try_from(slot)
            .ok()
            .and_then(|s| self.slots.get(s))
            .ok_or(FrameError::Slot(slot))
    }
}

impl Default for Ring<(Bytes, Bytes)> {
    fn default() -> Self {
        Ring::with(PAIR_SLOTS)
    }
}

impl Default for Ring<Bytes> {
    fn default() -> Self {
        Ring::with(NAME_SLOTS)
    }
}

impl Tables {
    /// Appends `frame` to `out`, updating the tables as the reader will;
    /// what of it was header blocks and body bytes (the rest is framing).
    pub fn write(&mut self, frame: &Frame, out: &mut BytesMut) -> Written {
        match frame {
            Frame::Call(id, part) => return self.write_part(*id, part, out),
            Frame::Reset(id, code) => {
                out.put_u8(RESET);
                varint(out, u64::from(*id));
                varint(out, u64::from(*code));
            }
            Frame::Credit(id, bytes) => {
                out.put_u8(CREDIT);
                varint(out, u64::from(*id));
                varint(out, u64::from(*bytes));
            }
            Frame::GoAway => {
                out.put_u8(GOAWAY);
                varint(out, 0);
            }
        }
        Written::default()
    }

    fn write_part(&mut self, id: u32, part: &Part, out: &mut BytesMut) -> Written {
        let mut written = Written::default();
        let mut flags = 0;
        let head = part.head.as_ref().map(|h| plan(&self.last_head, h));
        let tail = part.tail.as_ref().map(|t| plan(&self.last_tail, t));
        if let Some(plan) = &head {
            flags |= HEAD | if plan.same() { SAME_HEAD } else { 0 };
        }
        if part.data.is_some() {
            flags |= DATA | if part.grpc { GRPC } else { 0 };
        }
        if part.end || part.tail.is_some() {
            flags |= END;
        }
        if let Some(plan) = &tail {
            flags |= TAIL | if plan.same() { SAME_TAIL } else { 0 };
        }
        out.put_u8(flags);
        varint(out, u64::from(id));
        if let (Some(plan), Some(pairs)) = (head, &part.head) {
            written.headers += self
                .dictionary
                .write_list(&plan, pairs, &mut self.last_head, out);
        }
        if let Some(data) = &part.data {
            varint(out, data.len() as u64);
            out.put_slice(data);
            written.data += data.len();
        }
        if let (Some(plan), Some(pairs)) = (tail, &part.tail) {
            written.headers += self
                .dictionary
                .write_list(&plan, pairs, &mut self.last_tail, out);
        }
        written
    }

    /// Reads the next frame from `batch`, updating the tables as the writer
    /// did. The frame's data shares `batch`'s memory.
    pub fn read(&mut self, batch: &mut Bytes) -> Result<Frame, FrameError> {
        let flags = byte(batch)?;
        let id = number(batch)?;
        if flags & CONTROL != 0 {
            return match flags {
                RESET => Ok(Frame::Reset(id, number(batch)?)),
                CREDIT => Ok(Frame::Credit(id, number(batch)?)),
                GOAWAY => Ok(Frame::GoAway),
                other => Err(FrameError::Flags(other)),
            };
        }
        let meaningless = (flags & GRPC != 0 && flags & DATA == 0)
            || (flags & SAME_HEAD != 0 && flags & HEAD == 0)
            || (flags & SAME_TAIL != 0 && flags & TAIL == 0)
            || (flags & TAIL != 0 && flags & END == 0)
            || flags & (HEAD | DATA | END) == 0;
        if meaningless {
            return Err(FrameError::Flags(flags));
        }
        let mut part = Part {
            grpc: flags & GRPC != 0,
            end: flags & END != 0,
            ..Part::default()
        };
        if flags & HEAD != 0 {
            let same = flags & SAME_HEAD != 0;
            part.head = Some(
                self.dictionary
                    .read_list(same, &mut self.last_head, batch)?,
            );
        }
        if flags & DATA != 0 {
            let len = usize::try_from(number(batch)?).map_err(|_| FrameError::Short)?;
            if batch.len() < len {
                return Err(FrameError::Short);
            }
            part.data = Some(batch.split_to(len));
        }
        if flags & TAIL != 0 {
            let same = flags & SAME_TAIL != 0;
            part.tail = Some(
                self.dictionary
                    .read_list(same, &mut self.last_tail, batch)?,
            );
        }
        Ok(Frame::Call(id, part))
    }
}

impl Dictionary {
    /// Writes `pairs` by `plan` (nothing where they are the same as
    /// `last`), makes them the new `last` as the reader will have them,
    /// and returns the bytes written.
    fn write_list(
        &mut self,
        plan: &Plan,
        pairs: &Pairs,
        last: &mut Pairs,
        out: &mut BytesMut,
    ) -> usize {
        let before = out.len();
        if !plan.same() {
            self.write_block(plan, pairs, out);
        }
        *last = plan.order(last, pairs);
        out.len() - before
    }

    /// Reads a list written by [`Dictionary::write_list`] (`same`: none
    /// was written, it is `last`) and makes it the new `last`.
    fn read_list(
        &mut self,
        same: bool,
        last: &mut Pairs,
        batch: &mut Bytes,
    ) -> Result<Pairs, FrameError> {
        let pairs = if same {
            last.clone()
        } else {
            self.read_block(last, batch)?
        };
        last.clone_from(&pairs);
        Ok(pairs)
    }

    fn write_block(&mut self, plan: &Plan, pairs: &Pairs, out: &mut BytesMut) {
        varint(out, plan.keep as u64);
        varint(out, plan.extra.len() as u64);
        for &at in &plan.extra {
            let (name, value) = &pairs[at];
            let pair = (name.clone(), value.clone());
            if let Some(&slot) = self.pairs.index.get(&pair) {
                varint(out, (slot as u64) << 1 | 1);
                continue;
            }
            match self.names.index.get(name) {
                Some(&slot) => varint(out, (slot as u64 + 1) << 1),
                None => {
                    varint(out, 0);
                    varint(out, name.len() as u64);
                    out.put_slice(name);
                    if name.len() <= MAX_REMEMBERED {
                        self.names.insert(owned(name));
                    }
                }
            }
            varint(out, value.len() as u64);
            out.put_slice(value);
            if name.len() + value.len() <= MAX_REMEMBERED {
                self.pairs.insert((owned(name), owned(value)));
            }
        }
    }

    fn read_block(&mut self, last: &Pairs, batch: &mut Bytes) -> Result<Pairs, FrameError> {
        let keep = small(batch)?;
        let extra = small(batch)?;
        if keep > last.len() {
            return Err(FrameError::Keep {
                keep,
                had: last.len(),
            });
        }
        if keep + extra > MAX_PAIRS {
            return Err(FrameError::BlockTooLarge);
        }
        let mut pairs: Pairs = last[..keep].to_vec();
        let mut size: usize = pairs.iter().map(|(n, v)| n.len() + v.len()).sum();
        for _ in 0..extra {
            let code = u64::from(number(batch)?);
            let pair = if code & 1 == 1 {
                self.pairs.get(code >> 1)?.clone()
            } else {
                let name = match code >> 1 {
                    0 => {
                        let name = bytes(batch, MAX_BLOCK_BYTES - size)?;
                        if name.len() <= MAX_REMEMBERED {
                            self.names.insert(owned(&name));
                        }
                        name
                    }
                    slot => self.names.get(slot - 1)?.clone(),
                };
                let room = MAX_BLOCK_BYTES.saturating_sub(size + name.len());
                let value = bytes(batch, room)?;
                if name.len() + value.len() <= MAX_REMEMBERED {
                    self.pairs.insert((owned(&name), owned(&value)));
                }
                (name, value)
            };
            size += pair.0.len() + pair.1.len();
            if size > MAX_BLOCK_BYTES {
                return Err(FrameError::BlockTooLarge);
            }
            pairs.push(pair);
        }
        Ok(pairs)
    }
}

/// A copy of `bytes` of its own, for what outlives the batch it came in
/// (a table slot, a call): `bytes` may be a slice of a batch of up to
/// [`MAX_BATCH`] bytes, which the slice would keep whole meanwhile.
pub(crate) fn owned(bytes: &Bytes) -> Bytes {
    Bytes::copy_from_slice(bytes)
}

/// How a header list is written against the last one: the first `keep`
/// pairs of the last list, then the pairs at `extra` of the new one.
struct Plan {
    keep: usize,
    extra: Vec<usize>,
    last_len: usize,
}

impl Plan {
    fn same(&self) -> bool {
        self.keep == self.last_len && self.extra.is_empty()
    }

    /// The list as the reader will have it: the kept start of `last`, then
    /// the rest of `pairs` in their order.
    fn order(&self, last: &Pairs, pairs: &Pairs) -> Pairs {
        let mut ordered: Pairs = last[..self.keep].to_vec();
        ordered.extend(self.extra.iter().map(|&at| pairs[at].clone()));
        ordered
    }
}

/// The longest start of `last` whose pairs are all in `pairs` once each,
/// under names that `pairs` holds once (so that moving them to the front
/// changes no name's order of values), and what is left to write.
fn plan(last: &Pairs, pairs: &Pairs) -> Plan {
    let mut used = vec![false; pairs.len()];
    let mut keep = 0;
    for pair in last {
        let once = pairs.iter().filter(|(n, _)| *n == pair.0).count() == 1;
        match pairs.iter().position(|p| p == pair) {
            Some(at) if once && !used[at] => {
                used[at] = true;
                keep += 1;
            }
            _ => break,
        }
    }
    let extra: Vec<usize> = (0..pairs.len()).filter(|&i| !used[i]).collect();
    Plan {
        keep,
        extra,
        last_len: last.len(),
    }
}

/// The gRPC message prefix of a batch of `len` bytes.
pub fn batch_prefix(len: usize) -> [u8; GRPC_PREFIX] {
    let mut prefix = [0; GRPC_PREFIX];
    prefix[1..].copy_from_slice(&(len as u32).to_be_bytes());
    prefix
}

/// The length of the batch at the front of `bytes` once it is all there;
/// an error for a batch flagged compressed or over [`MAX_BATCH`].
fn whole_len(bytes: &[u8]) -> Result<Option<usize>, FrameError> {
    let Some(prefix) = bytes.get(..GRPC_PREFIX) else {
        return Ok(None);
    };
    let len = u32::from_be_bytes([prefix[1], prefix[2], prefix[3], prefix[4]]) as usize;
    if prefix[0] != 0 || len > MAX_BATCH {
        return Err(FrameError::Batch(len, prefix[0]));
    }
    Ok((bytes.len() >= GRPC_PREFIX + len).then_some(len))
}

/// Takes one whole batch off the front of `buffer`, if one is there.
pub fn next_batch(buffer: &mut BytesMut) -> Result<Option<Bytes>, FrameError> {
    let Some(len) = whole_len(buffer)? else {
        return Ok(None);
    };
    buffer.advance(GRPC_PREFIX);
    Ok(Some(buffer.split_to(len).freeze()))
}

/// [`next_batch`] from a chunk as it came, without copying it.
pub fn take_batch(chunk: &mut Bytes) -> Result<Option<Bytes>, FrameError> {
    let Some(len) = whole_len(chunk)? else {
        return Ok(None);
    };
    chunk.advance(GRPC_PREFIX);
    Ok(Some(chunk.split_to(len)))
}

/// The message of `body` if it is exactly one uncompressed gRPC message.
pub fn single_grpc_message(body: &Bytes) -> Option<Bytes> {
    if body.len() < GRPC_PREFIX || body[0] != 0 {
        return None;
    }
    let len = u32::from_be_bytes([body[1], body[2], body[3], body[4]]) as usize;
    (len == body.len() - GRPC_PREFIX).then(|| body.slice(GRPC_PREFIX..))
}

/// The gRPC prefix of a whole message of `len` bytes, as [`Part::grpc`]
/// data gets back.
pub fn grpc_prefix(len: usize) -> Bytes {
    Bytes::copy_from_slice(&batch_prefix(len))
}

fn varint(out: &mut BytesMut, mut value: u64) {
    while value >= 0x80 {
        out.put_u8((value as u8) | 0x80);
        value >>= 7;
    }
    out.put_u8(value as u8);
}

fn byte(batch: &mut Bytes) -> Result<u8, FrameError> {
    if batch.is_empty() {
        return Err(FrameError::Short);
    }
    Ok(batch.get_u8())
}

fn number(batch: &mut Bytes) -> Result<u32, FrameError> {
    let mut value: u64 = 0;
    for shift in (0..35).step_by(7) {
        let b = byte(batch)?;
        value |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return u32::try_from(value).map_err(|_| FrameError::Number);
        }
    }
    Err(FrameError::Number)
}

fn small(batch: &mut Bytes) -> Result<usize, FrameError> {
    let n = number(batch)? as usize;
    if n > MAX_PAIRS {
        return Err(FrameError::BlockTooLarge);
    }
    Ok(n)
}

fn bytes(batch: &mut Bytes, room: usize) -> Result<Bytes, FrameError> {
    let len = number(batch)? as usize;
    if len > room {
        return Err(FrameError::BlockTooLarge);
    }
    if batch.len() < len {
        return Err(FrameError::Short);
    }
    Ok(batch.split_to(len))
}

#[cfg(test)]
mod tests;
