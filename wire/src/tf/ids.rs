//! Row ids as a `RecvTensor` response carries them: the int64 (or int32)
//! lookup ids a worker sends a parameter task for a gather, or the indices
//! of an `IndexedSlices` gradient.

use super::proto::{DataType, RecvTensorResponse};

/// Why a response holds no ids this reader accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum IdsError {
    /// Dead, or without a tensor.
    #[error("no tensor")]
    NoTensor,
    /// Neither int64 nor int32.
    #[error("ids of type {0}, not int64 or int32")]
    NotInteger(i32),
    /// The shape is negative, overflows, or names more ids than `max`.
    #[error("bad or too large shape")]
    Shape,
    /// The content does not hold exactly the shape's ids.
    #[error("content does not match the shape")]
    Content,
}

/// What a response's ids tensor declares: its type and shape, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdsShape {
    /// The tensor's dtype, `DT_INT64` or `DT_INT32`.
    pub dtype: i32,
    /// Bytes per id: 8 or 4.
    pub width: usize,
    /// The dims (none for a scalar).
    pub dims: Vec<u64>,
    /// How many ids the dims name, at most the `max` asked for.
    pub count: usize,
}

/// The type and shape of the ids `response` carries, at most `max` of
/// them, without reading the values.
pub fn ids_shape(response: &RecvTensorResponse, max: usize) -> Result<IdsShape, IdsError> {
    let tensor = response
        .tensor
        .as_ref()
        .filter(|_| !response.is_dead)
        .ok_or(IdsError::NoTensor)?;
    let width = match tensor.dtype {
        d if d == DataType::DtInt64 as i32 => 8,
        d if d == DataType::DtInt32 as i32 => 4,
        other => return Err(IdsError::NotInteger(other)),
    };
    let dims = tensor
        .tensor_shape
        .as_ref()
        .map_or(Some(Vec::new()), |shape| {
            shape
                .dim
                .iter()
                .map(|d| u64::try_from(d.size).ok())
                .collect()
        })
        .ok_or(IdsError::Shape)?;
    let count = dims
        .iter()
        .try_fold(1u64, |n, &d| n.checked_mul(d))
        .and_then(|n| usize::try_from(n).ok())
        .filter(|&n| n <= max)
        .ok_or(IdsError::Shape)?;
    Ok(IdsShape {
        dtype: tensor.dtype,
        width,
        dims,
        count,
    })
}

/// The ids a response carries, in position order, at most `max` of them.
pub fn read_ids(response: &RecvTensorResponse, max: usize) -> Result<Vec<i64>, IdsError> {
    let IdsShape { width, count, .. } = ids_shape(response, max)?;
    let Some(tensor) = response.tensor.as_ref() else {
        return Err(IdsError::NoTensor);
    };
    let content = &tensor.tensor_content;
    if !content.is_empty() {
        if Some(content.len()) != count.checked_mul(width) {
            return Err(IdsError::Content);
        }
        return Ok(match width {
            8 => content
                .chunks_exact(8)
                .map(|b| i64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]))
                .collect(),
            _ => content
                .chunks_exact(4)
                .map(|b| i64::from(i32::from_le_bytes([b[0], b[1], b[2], b[3]])))
                .collect(),
        });
    }
    // Small tensors may use the repeated fields instead.
    let values: Vec<i64> = if width == 8 {
        tensor.int64_val.clone()
    } else {
        tensor.int_val.iter().map(|&v| i64::from(v)).collect()
    };
    if values.len() != count {
        return Err(IdsError::Content);
    }
    Ok(values)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tf::proto::{TensorProto, TensorShapeProto};

    fn response(dtype: DataType, dims: &[i64], content: Vec<u8>) -> RecvTensorResponse {
        RecvTensorResponse {
            tensor: Some(TensorProto {
                dtype: dtype as i32,
                tensor_shape: Some(TensorShapeProto {
                    dim: dims
                        .iter()
                        .map(|&size| crate::tf::proto::Dim {
                            size,
                            ..Default::default()
                        })
                        .collect(),
                    ..Default::default()
                }),
                tensor_content: content.into(),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn reads_int64_and_int32_and_refuses_the_rest() {
        let ids: Vec<u8> = [4711i64, -1, 3]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        assert_eq!(
            read_ids(&response(DataType::DtInt64, &[3], ids.clone()), 10),
            Ok(vec![4711, -1, 3])
        );
        let small: Vec<u8> = [7i32, 8].iter().flat_map(|v| v.to_le_bytes()).collect();
        assert_eq!(
            read_ids(&response(DataType::DtInt32, &[2, 1], small), 10),
            Ok(vec![7, 8])
        );
        assert_eq!(
            read_ids(&response(DataType::DtInt64, &[3], ids.clone()), 2),
            Err(IdsError::Shape)
        );
        assert_eq!(
            read_ids(&response(DataType::DtInt64, &[4], ids.clone()), 10),
            Err(IdsError::Content)
        );
        assert_eq!(
            read_ids(&response(DataType::DtInt64, &[-3], ids.clone()), 10),
            Err(IdsError::Shape)
        );
        assert_eq!(
            read_ids(
                &response(DataType::DtInt64, &[i64::MAX, 4], ids.clone()),
                usize::MAX
            ),
            Err(IdsError::Shape)
        );
        assert_eq!(
            read_ids(&response(DataType::DtFloat, &[3], ids), 10),
            Err(IdsError::NotInteger(1))
        );
        let mut dead = response(DataType::DtInt64, &[0], vec![]);
        dead.is_dead = true;
        assert_eq!(read_ids(&dead, 10), Err(IdsError::NoTensor));
        assert_eq!(
            read_ids(&response(DataType::DtInt64, &[0], vec![]), 10),
            Ok(vec![])
        );
    }

    #[test]
    fn the_shape_is_read_without_the_values() {
        let shape = ids_shape(&response(DataType::DtInt32, &[2, 3], Vec::new()), 6).unwrap();
        assert_eq!(
            shape,
            IdsShape {
                dtype: DataType::DtInt32 as i32,
                width: 4,
                dims: vec![2, 3],
                count: 6
            }
        );
        let too_many = response(DataType::DtInt64, &[2, 3], Vec::new());
        assert_eq!(ids_shape(&too_many, 5), Err(IdsError::Shape));
        let negative = response(DataType::DtInt64, &[-1], Vec::new());
        assert_eq!(ids_shape(&negative, 5), Err(IdsError::Shape));
        let floats = response(DataType::DtFloat, &[1], Vec::new());
        assert!(matches!(
            ids_shape(&floats, 5),
            Err(IdsError::NotInteger(_))
        ));
    }
}
