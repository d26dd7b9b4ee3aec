//! Where every key and value of a parsed file sits, read in a second pass over the text only when
//! an error needs a line or a key path.
//!
//! toml_edit (the parser toml itself uses) keeps the byte span of every key, value and `[table]`
//! header, so the spans in toml's errors land on the same keys and values here.
//! Tables made by dotted keys (`translate.model = ...`) or implied by a header (`[a.b]` implies `a`)
//! have no span of their own, so they are placed by their key or their first entry.

use std::ops::Range;

use toml_edit::{ImDocument, Item, Key};

use super::{KeyPath, Segment};

/// The parsed file: its root node.
pub(super) struct Node<'t>(ImDocument<&'t str>);

/// A child of an item: its path segment, its key's span (tables only), and the item.
type Child<'a> = (Segment, Option<Range<usize>>, &'a Item);

impl<'t> Node<'t> {
    /// `None` when the text is not valid TOML.
    pub(super) fn parse(text: &'t str) -> Option<Node<'t>> {
        ImDocument::parse(text).ok().map(Node)
    }

    /// The path of the deepest key or value whose span holds `offset`.
    pub(super) fn path_at(&self, offset: usize) -> Option<KeyPath> {
        let mut path = KeyPath::default();
        find(self.0.as_item(), offset, &mut path).then_some(path)
    }

    /// Where `path` starts, or its deepest ancestor present in the file when it is absent.
    pub(super) fn offset_of(&self, path: &KeyPath) -> usize {
        let mut item = self.0.as_item();
        let mut offset = first_offset(item);
        for segment in &path.0 {
            let Some((key_span, child)) = child(item, segment) else {
                break;
            };
            item = child;
            offset = child
                .span()
                .or(key_span)
                .map(|span| span.start)
                .or_else(|| first_offset(child))
                .or(offset);
        }
        offset.unwrap_or(0)
    }

    /// The keys of the table at `path`, each with where it starts; none when the file has no such table.
    pub(super) fn keys_at(&self, path: &KeyPath) -> Vec<(String, usize)> {
        let mut item = self.0.as_item();
        for segment in &path.0 {
            match child(item, segment) {
                Some((_, child)) => item = child,
                None => return Vec::new(),
            }
        }
        let Some(table) = item.as_table_like() else {
            return Vec::new();
        };
        table
            .iter()
            .map(|(name, value)| {
                let at = table.key(name).and_then(Key::span).map(|span| span.start);
                let at = at.or_else(|| first_offset(value)).unwrap_or(0);
                (name.to_owned(), at)
            })
            .collect()
    }
}

fn find(item: &Item, offset: usize, path: &mut KeyPath) -> bool {
    for (segment, key_span, child) in children(item) {
        path.0.push(segment);
        if contains(key_span, offset) || find(child, offset, path) {
            return true;
        }
        path.0.pop();
    }
    contains(item.span(), offset)
}

fn child<'a>(item: &'a Item, segment: &Segment) -> Option<(Option<Range<usize>>, &'a Item)> {
    match segment {
        Segment::Key(name) => {
            let (key, child) = item.as_table_like()?.get_key_value(name)?;
            Some((key.span(), child))
        }
        Segment::Index(index) => item.get(*index).map(|child| (None, child)),
    }
}

/// The earliest position inside `item`, for items without a span of their own.
fn first_offset(item: &Item) -> Option<usize> {
    let inner = children(item).filter_map(|(_, key_span, child)| {
        let key_start = key_span.map(|span| span.start);
        key_start.into_iter().chain(first_offset(child)).min()
    });
    item.span()
        .map(|span| span.start)
        .into_iter()
        .chain(inner)
        .min()
}

/// A table's entries (standard or inline), or an array's items (of values or of tables).
fn children(item: &Item) -> impl Iterator<Item = Child<'_>> {
    let entries = item.as_table_like().into_iter().flat_map(|table| {
        table.iter().map(move |(name, child)| {
            let key_span = table.key(name).and_then(Key::span);
            (Segment::Key(name.to_owned()), key_span, child)
        })
    });
    let items = (0..).map_while(move |index| {
        item.get(index)
            .map(|child| (Segment::Index(index), None, child))
    });
    entries.chain(items)
}

fn contains(span: Option<Range<usize>>, offset: usize) -> bool {
    span.is_some_and(|span| span.contains(&offset))
}
