/* The record parser of mq.records.records in C: the consumer's per-record loop;
 * the broker's check of produced records (validate_records, further down); the
 * producer's record encoders.
 *
 * parse_records() is mq.records.records._parse_records step for step: the
 * same fields read in the same order, the same checks, the same positions
 * counted past a field's end (a slice stops at the end of the data) and the
 * same errors with the same messages, so that the two are interchangeable and
 * the tests compare them byte for byte and message for message. Truncation
 * raises IndexError and a header key that is not UTF-8 UnicodeDecodeError, as
 * the Python loop does; the caller turns both into CorruptRecordError.
 *
 * Each record becomes an instance of a tuple subclass (a NamedTuple) built in
 * place: (offset, timestamp, key, value, headers) when topic is None, else
 * (topic, partition, offset, timestamp, key, value, headers, timestamp_type),
 * headers a tuple of (key, value) pairs. Records hold only immutable, atomic
 * values, so they are not tracked by the cyclic garbage collector.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

/* Read the zigzag varint at *pos of at most max_bytes (5: int32, 10: int64), with
   the Python reader's errors: IndexError past the end, CorruptRecordError for an
   encoding longer than max_bytes or a value that does not fit the type. */
static int
read_varint(const uint8_t *buf, Py_ssize_t end, Py_ssize_t *pos, int max_bytes,
            PyObject *corrupt, int64_t *out)
{
    Py_ssize_t p = *pos;
    uint64_t raw = 0;
    int shift = 0;
    char text[48];
    for (int i = 0; i < max_bytes; i++) {
        if (p < 0 || p >= end) {
            PyErr_SetString(PyExc_IndexError, "index out of range");
            return -1;
        }
        uint64_t byte = buf[p++];
        uint64_t bits = byte & 0x7F;
        raw |= bits << shift; /* shift <= 63 */
        if (byte < 0x80) {
            if (shift == 63 && bits > 1) { /* a tenth byte holding bits past the 64th */
                snprintf(text, sizeof text, "%#llx%016llx", (unsigned long long)(bits >> 1),
                         (unsigned long long)raw);
                PyErr_Format(corrupt, "varint %s is out of range", text);
                return -1;
            }
            if (max_bytes == 5 && (raw >> 32) != 0) {
                snprintf(text, sizeof text, "%#llx", (unsigned long long)raw);
                PyErr_Format(corrupt, "varint %s is out of range", text);
                return -1;
            }
            *out = (int64_t)(raw >> 1) ^ -(int64_t)(raw & 1);
            *pos = p;
            return 0;
        }
        shift += 7;
    }
    PyErr_Format(corrupt, "varint is longer than %d bytes", max_bytes);
    return -1;
}

/* data[lo:hi] with Python's slice clamping (hi >= lo here). */
static PyObject *
slice(const uint8_t *buf, Py_ssize_t end, Py_ssize_t lo, Py_ssize_t hi)
{
    if (lo > end) lo = end;
    if (hi > end) hi = end;
    if (hi < lo) hi = lo;
    return PyBytes_FromStringAndSize((const char *)buf + lo, hi - lo);
}

/* A nullable field of `size` bytes at *pos: bytes, None for -1, an error below. */
static PyObject *
nullable(const uint8_t *buf, Py_ssize_t end, Py_ssize_t *pos, int64_t size, PyObject *corrupt)
{
    if (size < 0) {
        if (size != -1) {
            PyErr_Format(corrupt, "negative length %lld", (long long)size);
            return NULL;
        }
        Py_RETURN_NONE;
    }
    PyObject *field = slice(buf, end, *pos, *pos + (Py_ssize_t)size);
    *pos += (Py_ssize_t)size;
    return field;
}

/* base + delta as a Python int, exact even past int64. */
static PyObject *
add_int(int64_t base, int64_t delta)
{
    int64_t sum;
    if (!__builtin_add_overflow(base, delta, &sum)) {
        return PyLong_FromLongLong(sum);
    }
    PyObject *a = PyLong_FromLongLong(base);
    PyObject *b = PyLong_FromLongLong(delta);
    PyObject *r = (a && b) ? PyNumber_Add(a, b) : NULL;
    Py_XDECREF(a);
    Py_XDECREF(b);
    return r;
}

/* The headers of a record: a tuple of (str, bytes | None) pairs, () for none. */
static PyObject *
parse_headers(const uint8_t *buf, Py_ssize_t end, Py_ssize_t *pos, Py_ssize_t record_end,
              PyObject *corrupt)
{
    int64_t count;
    if (buf[*pos] == 0) { /* no headers, the usual case (*pos < end: checked by the caller) */
        *pos += 1;
        return PyTuple_New(0);
    }
    if (read_varint(buf, end, pos, 5, corrupt, &count) < 0) return NULL;
    if (count == 0) return PyTuple_New(0);
    int64_t room = (int64_t)(record_end - *pos);
    /* not 0 < count <= room // 2, with Python's floor division */
    if (count < 0 || room < 0 || count > room / 2) {
        PyErr_Format(corrupt, "record claims %lld headers", (long long)count);
        return NULL;
    }
    PyObject *headers = PyTuple_New((Py_ssize_t)count);
    if (headers == NULL) return NULL;
    for (Py_ssize_t i = 0; i < (Py_ssize_t)count; i++) {
        int64_t key_size, value_size;
        if (read_varint(buf, end, pos, 5, corrupt, &key_size) < 0) goto fail;
        if (key_size < 0) {
            PyErr_Format(corrupt, "header key length %lld", (long long)key_size);
            goto fail;
        }
        Py_ssize_t lo = *pos < end ? *pos : end;
        Py_ssize_t hi = *pos + (Py_ssize_t)key_size;
        if (hi > end) hi = end;
        if (hi < lo) hi = lo;
        PyObject *key = PyUnicode_DecodeUTF8((const char *)buf + lo, hi - lo, "strict");
        if (key == NULL) goto fail;
        *pos += (Py_ssize_t)key_size;
        if (read_varint(buf, end, pos, 5, corrupt, &value_size) < 0) {
            Py_DECREF(key);
            goto fail;
        }
        PyObject *value = nullable(buf, end, pos, value_size, corrupt);
        if (value == NULL) {
            Py_DECREF(key);
            goto fail;
        }
        PyObject *pair = PyTuple_Pack(2, key, value);
        Py_DECREF(key);
        Py_DECREF(value);
        if (pair == NULL) goto fail;
        PyObject_GC_UnTrack(pair); /* a str and bytes or None: nothing for the GC to visit */
        PyTuple_SET_ITEM(headers, i, pair);
    }
    PyObject_GC_UnTrack(headers);
    return headers;
fail:
    Py_DECREF(headers);
    return NULL;
}

/* One varint inline when it is one byte; the general reader otherwise. */
#define VARINT(dst, max)                                                        \
    do {                                                                        \
        if (pos >= 0 && pos < end && buf[pos] < 0x80) {                         \
            uint8_t b_ = buf[pos++];                                            \
            (dst) = (int64_t)(b_ >> 1) ^ -(int64_t)(b_ & 1);                    \
        } else if (read_varint(buf, end, &pos, (max), corrupt, &(dst)) < 0) {   \
            goto fail;                                                          \
        }                                                                       \
    } while (0)

PyDoc_STRVAR(parse_records_doc,
"parse_records(data, pos, count, base_offset, base_timestamp, append_time, last_delta,\n"
"              kind, topic, partition, timestamp_type, corrupt) -> (records, pos)\n\n"
"Parse count records from data[pos:], as mq.records.records._parse_records does.");

static PyObject *
parse_records(PyObject *self, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t pos, count;
    long long base_offset, base_timestamp, last_delta;
    PyObject *append_time, *kind, *topic, *partition, *timestamp_type, *corrupt;
    if (!PyArg_ParseTuple(args, "y*nnLLOLO!OOOO", &view, &pos, &count, &base_offset,
                          &base_timestamp, &append_time, &last_delta, &PyType_Type, &kind,
                          &topic, &partition, &timestamp_type, &corrupt)) {
        return NULL;
    }
    PyTypeObject *type = (PyTypeObject *)kind;
    PyObject *records = NULL, *fixed_time = NULL;
    if (!PyType_IsSubtype(type, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "kind must be a tuple type");
        goto fail;
    }
    if (append_time != Py_None) {
        if (!PyLong_Check(append_time)) {
            PyErr_SetString(PyExc_TypeError, "append_time must be an int or None");
            goto fail;
        }
        fixed_time = append_time;
    }
    const uint8_t *buf = (const uint8_t *)view.buf;
    const Py_ssize_t end = view.len;
    const int prefixed = topic != Py_None;
    const Py_ssize_t width = prefixed ? 8 : 5;
    const int untrack = type->tp_dictoffset == 0 && PyType_IS_GC(type) &&
                        (!prefixed || (PyUnicode_CheckExact(topic) && PyLong_CheckExact(partition) &&
                                       PyLong_CheckExact(timestamp_type)));
    int64_t previous_delta = -1;
    records = PyList_New(count > 0 ? count : 0);
    if (records == NULL) goto fail;
    for (Py_ssize_t i = 0; i < count; i++) {
        int64_t length, ts_delta, offset_delta, key_size, value_size;
        VARINT(length, 5);
        Py_ssize_t record_end = pos + (Py_ssize_t)length;
        if (length < 6 || record_end > end) {
            PyErr_Format(corrupt, "record length %lld is impossible here", (long long)length);
            goto fail;
        }
        pos += 1; /* attributes: unused */
        VARINT(ts_delta, 10);
        VARINT(offset_delta, 5);
        if (!(previous_delta < offset_delta && offset_delta <= last_delta)) {
            PyErr_Format(corrupt, "offset delta %lld after %lld", (long long)offset_delta,
                         (long long)previous_delta);
            goto fail;
        }
        previous_delta = offset_delta;
        PyObject *key, *value, *headers;
        if (pos < 0 || pos >= end) {
            PyErr_SetString(PyExc_IndexError, "index out of range");
            goto fail;
        }
        if (buf[pos] == 1) { /* -1: a null key, the usual case */
            pos += 1;
            key = Py_NewRef(Py_None);
        }
        else {
            VARINT(key_size, 5);
            key = nullable(buf, end, &pos, key_size, corrupt);
            if (key == NULL) goto fail;
        }
        if (read_varint(buf, end, &pos, 5, corrupt, &value_size) < 0) {
            Py_DECREF(key);
            goto fail;
        }
        value = nullable(buf, end, &pos, value_size, corrupt);
        if (value == NULL) {
            Py_DECREF(key);
            goto fail;
        }
        if (pos < 0 || pos >= end) {
            PyErr_SetString(PyExc_IndexError, "index out of range");
            Py_DECREF(key);
            Py_DECREF(value);
            goto fail;
        }
        headers = parse_headers(buf, end, &pos, record_end, corrupt);
        if (headers == NULL) {
            Py_DECREF(key);
            Py_DECREF(value);
            goto fail;
        }
        if (pos != record_end) {
            long long off = (long long)(pos - record_end);
            PyErr_Format(corrupt, off > 0 ? "record fields end +%lld bytes off"
                                          : "record fields end %lld bytes off", off);
            Py_DECREF(key);
            Py_DECREF(value);
            Py_DECREF(headers);
            goto fail;
        }
        PyObject *timestamp = fixed_time ? Py_NewRef(fixed_time) : add_int(base_timestamp, ts_delta);
        PyObject *offset = add_int(base_offset, offset_delta);
        PyObject *record = type->tp_alloc(type, width);
        if (timestamp == NULL || offset == NULL || record == NULL) {
            Py_XDECREF(timestamp);
            Py_XDECREF(offset);
            Py_XDECREF(record);
            Py_DECREF(key);
            Py_DECREF(value);
            Py_DECREF(headers);
            goto fail;
        }
        Py_ssize_t f = 0;
        if (prefixed) {
            PyTuple_SET_ITEM(record, f++, Py_NewRef(topic));
            PyTuple_SET_ITEM(record, f++, Py_NewRef(partition));
        }
        PyTuple_SET_ITEM(record, f++, offset);
        PyTuple_SET_ITEM(record, f++, timestamp);
        PyTuple_SET_ITEM(record, f++, key);
        PyTuple_SET_ITEM(record, f++, value);
        PyTuple_SET_ITEM(record, f++, headers);
        if (prefixed) {
            PyTuple_SET_ITEM(record, f++, Py_NewRef(timestamp_type));
        }
        if (untrack) {
            /* Every field is an int, str, bytes, None or a tuple of those: the
               collector has nothing to find in the record (CPython untracks such
               tuples itself, but only once a collection has walked them; with a
               consumer holding many records, those walks were a third of its CPU). */
            PyObject_GC_UnTrack(record);
        }
        PyList_SET_ITEM(records, i, record);
    }
    PyBuffer_Release(&view);
    return Py_BuildValue("(Nn)", records, pos);
fail:
    PyBuffer_Release(&view);
    Py_XDECREF(records);
    return NULL;
}

/* -- validation ---------------------------------------------------------------- */

/* Raise invalid for a field of record i ("record 3: key length 7 runs past ..."), of its
   header h when h >= 0 ("record 3: header 0 key is not UTF-8"). Messages are only
   formatted here, on the way out: the loop itself builds no strings. */
static void
field_error(PyObject *invalid, Py_ssize_t i, int64_t h, const char *field, const char *what)
{
    if (h < 0) {
        PyErr_Format(invalid, "record %zd: %s %s", i, field, what);
    }
    else {
        PyErr_Format(invalid, "record %zd: header %lld %s %s", i, (long long)h, field, what);
    }
}

/* The varint at *pos of at most max_bytes, read no further than limit: 0, or -1 with
   the exception set, its message naming record i (header h) and the field. */
static int
check_varint(const uint8_t *buf, Py_ssize_t limit, Py_ssize_t *pos, int max_bytes,
             PyObject *invalid, Py_ssize_t i, int64_t h, const char *field, int64_t *out)
{
    Py_ssize_t p = *pos;
    uint64_t raw = 0;
    int shift = 0;
    char what[48];
    for (int n = 0; n < max_bytes; n++) {
        if (p >= limit) {
            field_error(invalid, i, h, field, "varint is truncated");
            return -1;
        }
        uint64_t byte = buf[p++];
        uint64_t bits = byte & 0x7F;
        raw |= bits << shift; /* shift <= 63 */
        if (byte < 0x80) {
            if ((shift == 63 && bits > 1) || (max_bytes == 5 && (raw >> 32) != 0)) {
                field_error(invalid, i, h, field, "varint is out of range");
                return -1;
            }
            *out = (int64_t)(raw >> 1) ^ -(int64_t)(raw & 1);
            *pos = p;
            return 0;
        }
        shift += 7;
    }
    snprintf(what, sizeof what, "varint is longer than %d bytes", max_bytes);
    field_error(invalid, i, h, field, what);
    return -1;
}

/* One varint inline when it is one or two bytes inside the limit (nearly every length
   and delta); the general reader otherwise. */
#define CHECK_VARINT(dst, limit, max, h, field)                                      \
    do {                                                                             \
        if (pos < (limit) && buf[pos] < 0x80) {                                      \
            uint8_t b_ = buf[pos++];                                                 \
            (dst) = (int64_t)(b_ >> 1) ^ -(int64_t)(b_ & 1);                         \
        } else if (pos + 1 < (limit) && buf[pos + 1] < 0x80) {                       \
            uint32_t r_ = (uint32_t)(buf[pos] & 0x7F) | ((uint32_t)buf[pos + 1] << 7); \
            pos += 2;                                                                \
            (dst) = (int64_t)(r_ >> 1) ^ -(int64_t)(r_ & 1);                         \
        } else if (check_varint(buf, (limit), &pos, (max), invalid, i, (h), (field), \
                                &(dst)) < 0) {                                       \
            goto fail;                                                               \
        }                                                                            \
    } while (0)

/* Whether buf[0:n] is UTF-8 as Python's strict decoder takes it (no surrogates,
   no overlong forms, nothing past U+10FFFF). */
static int
is_utf8(const uint8_t *s, Py_ssize_t n)
{
    Py_ssize_t k = 0;
    while (k < n) {
        uint8_t c = s[k];
        if (c < 0x80) {
            k += 1;
            continue;
        }
        Py_ssize_t len;
        uint8_t lo = 0x80, hi = 0xBF; /* the range of the second byte */
        if (c >= 0xC2 && c <= 0xDF) len = 2;
        else if (c >= 0xE0 && c <= 0xEF) {
            len = 3;
            if (c == 0xE0) lo = 0xA0;
            if (c == 0xED) hi = 0x9F;
        }
        else if (c >= 0xF0 && c <= 0xF4) {
            len = 4;
            if (c == 0xF0) lo = 0x90;
            if (c == 0xF4) hi = 0x8F;
        }
        else return 0;
        if (n - k < len) return 0;
        if (s[k + 1] < lo || s[k + 1] > hi) return 0;
        for (Py_ssize_t j = 2; j < len; j++) {
            if ((s[k + j] & 0xC0) != 0x80) return 0;
        }
        k += len;
    }
    return 1;
}

/* A nullable field's length: -1 (null) or within the record; pos moves past its bytes. */
#define CHECK_FIELD(size, h, field)                                                      \
    do {                                                                                 \
        if ((size) < -1) {                                                               \
            snprintf(what, sizeof what, "length %lld is negative", (long long)(size));   \
            field_error(invalid, i, (h), (field), what);                                 \
            goto fail;                                                                   \
        }                                                                                \
        if ((size) > record_end - pos) {                                                 \
            snprintf(what, sizeof what, "length %lld runs past the record (%zd bytes left)", \
                     (long long)(size), record_end - pos);                               \
            field_error(invalid, i, (h), (field), what);                                 \
            goto fail;                                                                   \
        }                                                                                \
        if ((size) > 0) pos += (Py_ssize_t)(size);                                       \
    } while (0)

PyDoc_STRVAR(validate_records_doc,
"validate_records(data, pos, end, count, invalid) -> None\n\n"
"Check that data[pos:end] holds exactly count well-formed records with offset deltas\n"
"0..count-1, as mq.records.record_loops.validate_records does; raise invalid otherwise.\n"
"No Python object is made per record.");

static PyObject *
validate_records(PyObject *self, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t pos, end, count;
    PyObject *invalid;
    if (!PyArg_ParseTuple(args, "y*nnnO", &view, &pos, &end, &count, &invalid)) {
        return NULL;
    }
    const uint8_t *buf = (const uint8_t *)view.buf;
    Py_ssize_t i = 0;
    char what[96]; /* an error's text, formatted only on the way out */
    if (pos < 0 || end > view.len || pos > end || count < 0) {
        PyErr_SetString(PyExc_ValueError, "pos, end or count out of range");
        goto fail;
    }
    if (count > (end - pos) / 7) { /* MIN_RECORD_SIZE */
        PyErr_Format(invalid, "%zd bytes cannot hold %zd records", end - pos, count);
        goto fail;
    }
    for (; i < count; i++) {
        int64_t length, delta, size, n_headers;
        CHECK_VARINT(length, end, 5, -1, "length");
        if (length < 6) {
            PyErr_Format(invalid, "record %zd: length %lld is below the minimum of 6", i,
                         (long long)length);
            goto fail;
        }
        if (length > end - pos) {
            PyErr_Format(invalid, "record %zd: length %lld runs past the records (%zd bytes left)",
                         i, (long long)length, end - pos);
            goto fail;
        }
        const Py_ssize_t record_end = pos + (Py_ssize_t)length;
        pos += 1; /* attributes: unused */
        CHECK_VARINT(delta, record_end, 10, -1, "timestamp delta");
        CHECK_VARINT(delta, record_end, 5, -1, "offset delta");
        if (delta != i) {
            PyErr_Format(invalid, "record %zd: offset delta %lld, expected %zd", i,
                         (long long)delta, i);
            goto fail;
        }
        CHECK_VARINT(size, record_end, 5, -1, "key length");
        CHECK_FIELD(size, -1, "key");
        CHECK_VARINT(size, record_end, 5, -1, "value length");
        CHECK_FIELD(size, -1, "value");
        CHECK_VARINT(n_headers, record_end, 5, -1, "header count");
        if (n_headers < 0 || n_headers > (record_end - pos) / 2) {
            PyErr_Format(invalid, "record %zd: header count %lld does not fit the record "
                         "(%zd bytes left)", i, (long long)n_headers, record_end - pos);
            goto fail;
        }
        for (int64_t h = 0; h < n_headers; h++) {
            CHECK_VARINT(size, record_end, 5, h, "key length");
            if (size < 0) {
                snprintf(what, sizeof what, "length %lld is negative", (long long)size);
                field_error(invalid, i, h, "key", what);
                goto fail;
            }
            const Py_ssize_t key_at = pos;
            CHECK_FIELD(size, h, "key");
            if (!is_utf8(buf + key_at, (Py_ssize_t)size)) {
                field_error(invalid, i, h, "key", "is not UTF-8");
                goto fail;
            }
            CHECK_VARINT(size, record_end, 5, h, "value length");
            CHECK_FIELD(size, h, "value");
        }
        if (pos != record_end) {
            PyErr_Format(invalid, "record %zd: %zd bytes follow its last field", i,
                         record_end - pos);
            goto fail;
        }
    }
    if (pos != end) {
        PyErr_Format(invalid, "%zd bytes follow the last record", end - pos);
        goto fail;
    }
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
fail:
    PyBuffer_Release(&view);
    return NULL;
}

/* -- encoding ------------------------------------------------------------------ */

static Py_ssize_t
varint_size(int64_t value)
{
    uint64_t zigzag = ((uint64_t)value << 1) ^ (uint64_t)(value >> 63);
    Py_ssize_t n = 1;
    while (zigzag > 0x7F) {
        zigzag >>= 7;
        n++;
    }
    return n;
}

static uint8_t *
put_varint(uint8_t *out, int64_t value)
{
    uint64_t zigzag = ((uint64_t)value << 1) ^ (uint64_t)(value >> 63);
    while (zigzag > 0x7F) {
        *out++ = (uint8_t)((zigzag & 0x7F) | 0x80);
        zigzag >>= 7;
    }
    *out++ = (uint8_t)zigzag;
    return out;
}

/* A nullable field: its bytes in *view (view->obj NULL for None), its encoded size. */
static int
field_view(PyObject *field, Py_buffer *view, const char *what, Py_ssize_t *size)
{
    view->obj = NULL;
    if (field == Py_None) {
        *size += 1;
        return 0;
    }
    if (PyUnicode_Check(field) || PyObject_GetBuffer(field, view, PyBUF_SIMPLE) < 0) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "a record's %s is bytes or None, not %.80s", what,
                     Py_TYPE(field)->tp_name);
        view->obj = NULL;
        return -1;
    }
    *size += varint_size(view->len) + view->len;
    return 0;
}

static uint8_t *
put_field(uint8_t *out, Py_buffer *view)
{
    if (view->obj == NULL) {
        *out++ = 1; /* zigzag(-1): null */
        return out;
    }
    out = put_varint(out, view->len);
    memcpy(out, view->buf, view->len);
    return out + view->len;
}

#define MAX_HEADERS 4096

PyDoc_STRVAR(append_record_doc,
"append_record(buf, ts_delta, offset_delta, key, value, headers, limit) -> bool\n\n"
"Encode one record at the end of bytearray buf, as BatchBuilder.append does; when\n"
"limit >= 0 and buf would grow past it, leave buf as it was and return False.");

static PyObject *
append_record(PyObject *self, PyObject *args)
{
    PyObject *buf, *key, *value, *headers;
    long long ts_delta, offset_delta;
    Py_ssize_t limit;
    if (!PyArg_ParseTuple(args, "O!LLOOOn", &PyByteArray_Type, &buf, &ts_delta, &offset_delta,
                          &key, &value, &headers, &limit)) {
        return NULL;
    }
    Py_buffer key_view, value_view;
    key_view.obj = value_view.obj = NULL;
    PyObject *fast = NULL, *result = NULL;
    Py_ssize_t n_headers = 0;
    /* header keys as UTF-8 (cached in the str) and values as buffers */
    const char *hkeys[16];
    Py_ssize_t hkey_sizes[16];
    Py_buffer hvalues[16];
    const char **hk = hkeys;
    Py_ssize_t *hks = hkey_sizes;
    Py_buffer *hv = hvalues;
    Py_ssize_t filled = 0;

    Py_ssize_t size = 1 + varint_size(ts_delta) + varint_size(offset_delta);
    if (field_view(key, &key_view, "key", &size) < 0) goto done;
    if (field_view(value, &value_view, "value", &size) < 0) goto done;
    fast = PySequence_Fast(headers, "headers must be a sequence of (str, bytes | None) pairs");
    if (fast == NULL) goto done;
    n_headers = PySequence_Fast_GET_SIZE(fast);
    if (n_headers > MAX_HEADERS) {
        PyErr_Format(PyExc_ValueError, "a record takes at most %d headers", MAX_HEADERS);
        goto done;
    }
    if (n_headers > 16) {
        hk = PyMem_Malloc(n_headers * sizeof *hk);
        hks = PyMem_Malloc(n_headers * sizeof *hks);
        hv = PyMem_Malloc(n_headers * sizeof *hv);
        if (hk == NULL || hks == NULL || hv == NULL) {
            PyErr_NoMemory();
            goto done;
        }
    }
    size += varint_size(n_headers);
    for (Py_ssize_t i = 0; i < n_headers; i++) {
        PyObject *pair = PySequence_Fast_GET_ITEM(fast, i);
        if (!PyTuple_Check(pair) && !PyList_Check(pair)) {
            PyErr_Format(PyExc_TypeError, "a header is a (str, bytes | None) pair, not %.80s",
                         Py_TYPE(pair)->tp_name);
            goto done;
        }
        if (PySequence_Fast_GET_SIZE(pair) != 2) {
            PyErr_SetString(PyExc_ValueError, "a header is a (str, bytes | None) pair");
            goto done;
        }
        PyObject *hkey = PySequence_Fast_GET_ITEM(pair, 0);
        if (!PyUnicode_Check(hkey)) {
            PyErr_Format(PyExc_TypeError, "a header key is a str, not %.80s",
                         Py_TYPE(hkey)->tp_name);
            goto done;
        }
        hk[i] = PyUnicode_AsUTF8AndSize(hkey, &hks[i]);
        if (hk[i] == NULL) goto done;
        size += varint_size(hks[i]) + hks[i];
        if (field_view(PySequence_Fast_GET_ITEM(pair, 1), &hv[i], "header value", &size) < 0)
            goto done;
        filled = i + 1;
    }
    if (size > INT32_MAX) {
        PyErr_Format(PyExc_ValueError, "%zd does not fit a varint (int32)", size);
        goto done;
    }
    Py_ssize_t start = PyByteArray_GET_SIZE(buf);
    Py_ssize_t total = varint_size(size) + size;
    if (limit >= 0 && start + total > limit) {
        result = Py_NewRef(Py_False);
        goto done;
    }
    if (PyByteArray_Resize(buf, start + total) < 0) goto done;
    uint8_t *out = (uint8_t *)PyByteArray_AS_STRING(buf) + start;
    out = put_varint(out, size);
    *out++ = 0; /* attributes: unused */
    out = put_varint(out, ts_delta);
    out = put_varint(out, offset_delta);
    out = put_field(out, &key_view);
    out = put_field(out, &value_view);
    out = put_varint(out, n_headers);
    for (Py_ssize_t i = 0; i < n_headers; i++) {
        out = put_varint(out, hks[i]);
        memcpy(out, hk[i], hks[i]);
        out = put_field(out + hks[i], &hv[i]);
    }
    result = Py_NewRef(Py_True);
done:
    if (key_view.obj != NULL) PyBuffer_Release(&key_view);
    if (value_view.obj != NULL) PyBuffer_Release(&value_view);
    for (Py_ssize_t i = 0; i < filled && hv != NULL; i++) {
        if (hv[i].obj != NULL) PyBuffer_Release(&hv[i]);
    }
    if (hk != hkeys) PyMem_Free((void *)hk);
    if (hks != hkey_sizes) PyMem_Free(hks);
    if (hv != hvalues) PyMem_Free(hv);
    Py_XDECREF(fast);
    return result;
}

PyDoc_STRVAR(append_values_doc,
"append_values(buf, values, start, first_delta, ts_delta, limit) -> int\n\n"
"Encode values[start:] as keyless, headerless records at the end of bytearray buf,\n"
"offset deltas from first_delta, as mq.records.bulk.encode_values does: as many as\n"
"keep buf within limit bytes (a batch's first record always). Returns how many.");

static PyObject *
append_values(PyObject *self, PyObject *args)
{
    PyObject *buf, *values;
    Py_ssize_t start, limit;
    long long first_delta, ts_delta;
    if (!PyArg_ParseTuple(args, "O!OnLLn", &PyByteArray_Type, &buf, &values, &start,
                          &first_delta, &ts_delta, &limit)) {
        return NULL;
    }
    PyObject *fast = PySequence_Fast(values, "values must be a sequence of bytes or None");
    if (fast == NULL) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    PyObject **items = PySequence_Fast_ITEMS(fast);
    if (start < 0) start = 0;
    const Py_ssize_t fixed = varint_size(ts_delta) + 3; /* attributes, null key, no headers */
    const Py_ssize_t used = PyByteArray_GET_SIZE(buf);
    Py_ssize_t total = 0, i = start;
    int64_t delta = first_delta;
    /* first pass: how many fit, and their bytes */
    for (; i < n; i++, delta++) {
        PyObject *value = items[i];
        Py_ssize_t size;
        if (value == Py_None) {
            size = fixed + varint_size(delta) + 1;
        }
        else {
            Py_ssize_t length;
            if (PyBytes_CheckExact(value)) {
                length = PyBytes_GET_SIZE(value);
            }
            else {
                Py_buffer view;
                if (PyUnicode_Check(value) || PyObject_GetBuffer(value, &view, PyBUF_SIMPLE) < 0) {
                    PyErr_Clear();
                    PyErr_Format(PyExc_TypeError, "a record's value is bytes or None, not %.80s",
                                 Py_TYPE(value)->tp_name);
                    Py_DECREF(fast);
                    return NULL;
                }
                length = view.len;
                PyBuffer_Release(&view);
            }
            size = fixed + varint_size(delta) + varint_size(length) + length;
        }
        Py_ssize_t record = varint_size(size) + size;
        if (used + total + record > limit && delta) break;
        total += record;
    }
    Py_ssize_t added = i - start;
    if (added == 0) {
        Py_DECREF(fast);
        return PyLong_FromLong(0);
    }
    if (PyByteArray_Resize(buf, used + total) < 0) {
        Py_DECREF(fast);
        return NULL;
    }
    uint8_t *out = (uint8_t *)PyByteArray_AS_STRING(buf) + used;
    delta = first_delta;
    for (i = start; i < start + added; i++, delta++) {
        PyObject *value = items[i];
        Py_buffer view;
        view.obj = NULL;
        const char *data = NULL;
        Py_ssize_t length = 0, size;
        if (value == Py_None) {
            size = fixed + varint_size(delta) + 1;
        }
        else {
            if (PyBytes_CheckExact(value)) {
                data = PyBytes_AS_STRING(value);
                length = PyBytes_GET_SIZE(value);
            }
            else { /* a buffer the first pass measured; no Python code ran since */
                if (PyObject_GetBuffer(value, &view, PyBUF_SIMPLE) < 0) {
                    Py_DECREF(fast);
                    PyByteArray_Resize(buf, used); /* shrinking: cannot fail */
                    return NULL;
                }
                data = view.buf;
                length = view.len;
            }
            size = fixed + varint_size(delta) + varint_size(length) + length;
        }
        out = put_varint(out, size);
        *out++ = 0; /* attributes */
        out = put_varint(out, ts_delta);
        out = put_varint(out, delta);
        *out++ = 1; /* null key */
        if (value == Py_None) {
            *out++ = 1; /* null value */
        }
        else {
            out = put_varint(out, length);
            memcpy(out, data, length);
            out += length;
        }
        *out++ = 0; /* no headers */
        if (view.obj != NULL) PyBuffer_Release(&view);
    }
    Py_DECREF(fast);
    return PyLong_FromSsize_t(added);
}

static PyMethodDef methods[] = {
    {"parse_records", parse_records, METH_VARARGS, parse_records_doc},
    {"append_record", append_record, METH_VARARGS, append_record_doc},
    {"append_values", append_values, METH_VARARGS, append_values_doc},
    {"validate_records", validate_records, METH_VARARGS, validate_records_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    "mq.records._speedups",
    "C versions of the record format's per-record loops (optional; pure Python otherwise).",
    -1,
    methods,
    NULL,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    return PyModule_Create(&module);
}
