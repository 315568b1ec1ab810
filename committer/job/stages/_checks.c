/* The whole-manifest checks of untrusted.py (EntryChecker.plain_files and plain_directories)
 * as one pass in C.
 *
 * The load stage checks every entry of every manifest before anything moves; done as a dozen
 * Python passes per manifest it was the largest part of that stage after JSON parsing. These
 * functions answer exactly what the Python versions answer, for ASCII strings only: anything
 * else (a non-ASCII path, a missing key, a wrong type, an unusual path) returns None, and the
 * caller falls back to the Python checks, which decide. So this code can only ever decline
 * more than Python does, never accept more (tests/committer/job/test_untrusted.py compares
 * the two on generated manifests).
 *
 * note_destinations is the load stage's duplicate-destination bookkeeping (load_manifests.py),
 * the other per-entry loop of that stage; names_in is the directory fast path's per-file loop
 * (move_directories.py).
 *
 * Optional: built when a compiler is present (setup.py). Written to the limited API of Python
 * 3.10 (setup.py defines Py_LIMITED_API), so one build (abi3) loads on every CPython from 3.10
 * on: lists, tuples and strs are read through functions, not the macros that read their
 * structs, and a str's characters through PyUnicode_AsUTF8AndSize.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <string.h>

static PyObject *KEY_s, *KEY_d, *KEY_z, *KEY_e, *KEY_t, *KEY_l;

/* The characters of an exact str holding only ASCII, which are then its bytes: a pointer into
 * the str (valid while it lives, NUL-terminated) and their count; NULL for anything else, with
 * no exception set. (CPython hands out an ASCII str's own buffer here; a str that is not ASCII
 * is given a UTF-8 copy, kept with it, which only tells us to decline.) */
static const char *
ascii_chars(PyObject *o, Py_ssize_t *len)
{
    if (!PyUnicode_CheckExact(o))
        return NULL;
    Py_ssize_t size;
    const char *p = PyUnicode_AsUTF8AndSize(o, &size);
    if (p == NULL) {  /* a lone surrogate: not ASCII */
        PyErr_Clear();
        return NULL;
    }
    if (size != PyUnicode_GetLength(o))
        return NULL;
    *len = size;
    return p;
}

/* The reserved words, taken out of their tuple once per call. */
typedef struct {
    const char *p;
    Py_ssize_t n;
} word;

#define MAX_RESERVED 16
typedef struct {
    word w[MAX_RESERVED];
    Py_ssize_t count;
} words;

static int
contains(const char *p, Py_ssize_t n, const char *word, Py_ssize_t w)
{
    /* the word's first character found by memchr (many bytes a step; glibc's memmem costs
     * more on paths this short) */
    if (w > n)
        return 0;
    const char *end = p + n - w + 1;
    for (const char *s = p; s < end; s++) {
        s = memchr(s, word[0], (size_t)(end - s));
        if (s == NULL)
            return 0;
        if (memcmp(s, word, (size_t)w) == 0)
            return 1;
    }
    return 0;
}

/* The rule of untrusted._all_plain for one relative path: non-empty, no empty segment (so no
 * leading, trailing or doubled '/'), no segment starting with '.', no '%' and no NUL; with
 * `reserved`, none of those words anywhere in it. */
static int
plain_rel(const char *p, Py_ssize_t n, const words *reserved)
{
    if (n == 0 || p[0] == '/' || p[0] == '.' || p[n - 1] == '/')
        return 0;
    /* memchr looks at many bytes a step: a few calls beat a loop over every character */
    if (memchr(p, '%', (size_t)n) != NULL || memchr(p, '\0', (size_t)n) != NULL)
        return 0;
    /* p[n - 1] is not '/', so a character follows each '/' */
    for (const char *s = memchr(p, '/', (size_t)n); s != NULL;
            s = memchr(s + 1, '/', (size_t)(p + n - (s + 1)))) {
        if (s[1] == '/' || s[1] == '.')
            return 0;
    }
    if (reserved != NULL) {
        for (Py_ssize_t j = 0; j < reserved->count; j++) {
            if (contains(p, n, reserved->w[j].p, reserved->w[j].n))
                return 0;
        }
    }
    return 1;
}

/* An ASCII string's characters and their count. */
typedef struct {
    const char *p;
    Py_ssize_t n;
} chars;

/* The ASCII `uri` starts with the ASCII `prefix` and the rest is a plain relative path: its
 * offset, else -1. */
static Py_ssize_t
plain_under(chars uri, chars prefix, const words *reserved)
{
    if (uri.n < prefix.n || memcmp(uri.p, prefix.p, (size_t)prefix.n) != 0)
        return -1;
    return plain_rel(uri.p + prefix.n, uri.n - prefix.n, reserved) ? prefix.n : -1;
}

/* A buffer to join strings in, grown as needed, freed by the caller. */
typedef struct {
    char *p;
    size_t cap;
} scratch;

/* ASCII `prefix` + uri[cut:] as a new str. */
static PyObject *
rebase(chars prefix, chars uri, Py_ssize_t cut, scratch *buf)
{
    size_t k = (size_t)prefix.n, rest = (size_t)(uri.n - cut);
    if (k + rest > buf->cap) {
        char *grown = PyMem_Realloc(buf->p, k + rest);
        if (grown == NULL)
            return PyErr_NoMemory();
        buf->p = grown;
        buf->cap = k + rest;
    }
    memcpy(buf->p, prefix.p, k);
    memcpy(buf->p + k, uri.p + cut, rest);
    /* decoding ASCII is a copy into the new str */
    return PyUnicode_FromStringAndSize(buf->p, (Py_ssize_t)(k + rest));
}

/* An exact dict whose keys are all exact str: looking a key up in it runs no Python code (no
 * __eq__ of a hostile key), so nothing can change the manifest while these functions hold
 * borrowed references into it. orjson's dicts always are. */
static int
plain_dict(PyObject *o)
{
    if (!PyDict_CheckExact(o))
        return 0;
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    while (PyDict_Next(o, &pos, &key, &value)) {
        if (!PyUnicode_CheckExact(key))
            return 0;
    }
    return 1;
}

/* A value of a plain_dict: 1 found (a borrowed reference), 0 missing, -1 error. */
static int
get(PyObject *dict, PyObject *key, PyObject **out)
{
    *out = PyDict_GetItemWithError(dict, key);
    if (*out != NULL)
        return 1;
    return PyErr_Occurred() ? -1 : 0;
}

/* An exact int >= 0: 1 yes, 0 no (no exception either way). */
static int
non_negative_int(PyObject *o)
{
    if (!PyLong_CheckExact(o))
        return 0;
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (v == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    return overflow > 0 || (overflow == 0 && v >= 0);
}

/* The characters of args[0..n), each an ASCII str: 1, else 0 (no exception). */
static int
all_ascii(PyObject *const *args, Py_ssize_t n, chars *out)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        if ((out[i].p = ascii_chars(args[i], &out[i].n)) == NULL)
            return 0;
    }
    return 1;
}

/* A tuple of at most MAX_RESERVED non-empty ASCII strs, taken into `out`: 1, else 0 (no
 * exception; the caller declines). The tuple is kept alive by the caller's argument. */
static int
reserved_words(PyObject *reserved, words *out)
{
    if (!PyTuple_CheckExact(reserved))
        return 0;
    Py_ssize_t k = PyTuple_Size(reserved);
    if (k > MAX_RESERVED)
        return 0;
    for (Py_ssize_t j = 0; j < k; j++) {
        const char *p = ascii_chars(PyTuple_GetItem(reserved, j), &out->w[j].n);
        if (p == NULL || out->w[j].n == 0)
            return 0;
        out->w[j].p = p;
    }
    out->count = k;
    return 1;
}

static int
six_arguments(const char *name, Py_ssize_t nargs)
{
    if (nargs == 6)
        return 1;
    PyErr_Format(PyExc_TypeError, "%s() takes 6 arguments (%zd given)", name, nargs);
    return 0;
}

/* Adds `o` to `set`: 1 added, 0 already there, -1 error. */
static int
add_new(PyObject *set, PyObject *o)
{
    Py_ssize_t before = PySet_Size(set);
    if (PySet_Add(set, o) < 0)
        return -1;
    return PySet_Size(set) > before;
}

PyDoc_STRVAR(files_doc,
"files(files, own_uri, dest_uri, own, dest_prefix, reserved, /)\n"
"--\n\n"
"EntryChecker.plain_files for ASCII manifests: a list of (source location, destination\n"
"location, size, etag), or None when any entry needs the Python checks.");

static PyObject *
files(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (!six_arguments("files", nargs))
        return NULL;
    PyObject *list = args[0];
    chars prefixes[4];  /* own_uri, dest_uri, own, dest_prefix */
    words reserved;
    if (!all_ascii(args + 1, 4, prefixes) || !reserved_words(args[5], &reserved)
            || !PyList_CheckExact(list) || PyList_Size(list) == 0)
        Py_RETURN_NONE;
    chars own_uri = prefixes[0], dest_uri = prefixes[1], own = prefixes[2],
          dest_prefix = prefixes[3];
    Py_ssize_t n = PyList_Size(list);
    PyObject *out = PyList_New(n);
    PyObject *sources = PySet_New(NULL), *dests = PySet_New(NULL);
    scratch buf = {NULL, 0};
    if (out == NULL || sources == NULL || dests == NULL)
        goto error;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *entry = PyList_GetItem(list, i);
        PyObject *s, *d, *z, *e;
        chars sc, dc;
        if (!plain_dict(entry))
            goto decline;
        int rs = get(entry, KEY_s, &s), rd = get(entry, KEY_d, &d), rz = get(entry, KEY_z, &z),
            re = get(entry, KEY_e, &e);
        if (rs < 0 || rd < 0 || rz < 0 || re < 0)
            goto error;
        if (!rs || !rd || !rz)
            goto decline;
        if (!re)
            e = Py_None;
        if ((sc.p = ascii_chars(s, &sc.n)) == NULL || (dc.p = ascii_chars(d, &dc.n)) == NULL
                || !non_negative_int(z) || !(e == Py_None || PyUnicode_CheckExact(e)))
            goto decline;
        Py_ssize_t cut_s = plain_under(sc, own_uri, NULL);
        Py_ssize_t cut_d = plain_under(dc, dest_uri, &reserved);
        if (cut_s < 0 || cut_d < 0)
            goto decline;
        int new_s = add_new(sources, s), new_d = add_new(dests, d);
        if (new_s < 0 || new_d < 0)
            goto error;
        if (!new_s || !new_d)
            goto decline;
        PyObject *src = rebase(own, sc, cut_s, &buf);
        PyObject *dst = src == NULL ? NULL : rebase(dest_prefix, dc, cut_d, &buf);
        if (dst == NULL) {
            Py_XDECREF(src);
            goto error;
        }
        Py_INCREF(z);
        Py_INCREF(e);
        PyObject *t = PyTuple_New(4);
        if (t == NULL) {
            Py_DECREF(src);
            Py_DECREF(dst);
            Py_DECREF(z);
            Py_DECREF(e);
            goto error;
        }
        /* each steals its item; on a new tuple and list neither can fail */
        PyTuple_SetItem(t, 0, src);
        PyTuple_SetItem(t, 1, dst);
        PyTuple_SetItem(t, 2, z);
        PyTuple_SetItem(t, 3, e);
        PyList_SetItem(out, i, t);
    }
    Py_DECREF(sources);
    Py_DECREF(dests);
    PyMem_Free(buf.p);
    return out;
decline:
    Py_DECREF(out);
    Py_DECREF(sources);
    Py_DECREF(dests);
    PyMem_Free(buf.p);
    Py_RETURN_NONE;
error:
    Py_XDECREF(out);
    Py_XDECREF(sources);
    Py_XDECREF(dests);
    PyMem_Free(buf.p);
    return NULL;
}

PyDoc_STRVAR(directories_doc,
"directories(dirs, dest_uri, root_uri, dest_prefix, statuses, reserved, /)\n"
"--\n\n"
"EntryChecker.plain_directories for ASCII manifests: {location: level} of the directories\n"
"to create (the first entry of a repeated one wins), or None when any entry needs the Python\n"
"checks.");

static PyObject *
directories(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (!six_arguments("directories", nargs))
        return NULL;
    PyObject *list = args[0], *dest_uri = args[1], *root_uri = args[2], *statuses = args[4];
    chars prefixes[3];  /* dest_uri, root_uri, dest_prefix */
    words reserved;
    if (!all_ascii(args + 1, 3, prefixes) || !reserved_words(args[5], &reserved)
            || !PyList_CheckExact(list) || !PyAnySet_CheckExact(statuses))
        Py_RETURN_NONE;
    chars dest = prefixes[0], dest_prefix = prefixes[2];
    PyObject *out = PyDict_New();
    scratch buf = {NULL, 0};
    if (out == NULL)
        return NULL;
    Py_ssize_t n = PyList_Size(list);
    /* One pass: any entry declined declines the whole list, so the order of the checks does
     * not change the answer; the destination itself is checked for types like the rest. */
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *entry = PyList_GetItem(list, i);
        PyObject *d, *t, *l;
        chars dc;
        if (!plain_dict(entry))
            goto decline;
        int rd = get(entry, KEY_d, &d), rt = get(entry, KEY_t, &t), rl = get(entry, KEY_l, &l);
        if (rd < 0 || rt < 0 || rl < 0)
            goto error;
        if (!rd || (dc.p = ascii_chars(d, &dc.n)) == NULL)
            goto decline;
        if (rt) {
            if (!PyLong_CheckExact(t))
                goto decline;
            int known = PySet_Contains(statuses, t);
            if (known < 0)
                goto error;
            if (!known)
                goto decline;
        }
        if (rl && !non_negative_int(l))
            goto decline;
        int is_root = PyUnicode_Compare(d, root_uri) == 0 || PyUnicode_Compare(d, dest_uri) == 0;
        if (PyErr_Occurred())
            goto error;
        if (is_root)  /* the destination itself exists: nothing to create */
            continue;
        Py_ssize_t cut = plain_under(dc, dest, &reserved);
        if (cut < 0)
            goto decline;
        PyObject *loc = rebase(dest_prefix, dc, cut, &buf);
        if (loc == NULL)
            goto error;
        /* the first entry of a repeated directory wins */
        int had = PyDict_Contains(out, loc);
        if (had == 0) {
            PyObject *level = rl ? Py_NewRef(l) : PyLong_FromLong(0);
            had = level == NULL ? -1 : PyDict_SetItem(out, loc, level);
            Py_XDECREF(level);
        }
        Py_DECREF(loc);
        if (had < 0)
            goto error;
    }
    PyMem_Free(buf.p);
    return out;
decline:
    Py_DECREF(out);
    PyMem_Free(buf.p);
    Py_RETURN_NONE;
error:
    Py_DECREF(out);
    PyMem_Free(buf.p);
    return NULL;
}

PyDoc_STRVAR(note_destinations_doc,
"note_destinations(entries, seen, suspects, parents, /) -> None\n\n"
"The load stage's bookkeeping of destinations, for a list of plan entries (tuples whose item 1\n"
"is the destination, an exact str): each destination's hash goes into seen, or into suspects\n"
"when seen holds it already (claimed twice, perhaps); its parent directory (the part before\n"
"the last '/') goes into parents.");

/* Does what load_manifests' Python version does with set operations, in one pass. Only exact
 * sets, tuples and strs are touched, so no Python code runs (int and str hash and compare in
 * C) while the borrowed references are held. */
static PyObject *
note_destinations(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 4 || !PyList_CheckExact(args[0]) || !PySet_CheckExact(args[1]) ||
        !PySet_CheckExact(args[2]) || !PySet_CheckExact(args[3])) {
        PyErr_SetString(PyExc_TypeError,
                        "note_destinations(list, set, set, set) takes four arguments");
        return NULL;
    }
    PyObject *entries = args[0], *seen = args[1], *suspects = args[2], *parents = args[3];
    for (Py_ssize_t i = 0; i < PyList_Size(entries); i++) {
        PyObject *entry = PyList_GetItem(entries, i);
        if (!PyTuple_CheckExact(entry) || PyTuple_Size(entry) < 2 ||
            !PyUnicode_CheckExact(PyTuple_GetItem(entry, 1))) {
            PyErr_SetString(PyExc_TypeError, "entries must be tuples with a str destination");
            return NULL;
        }
        PyObject *dest = PyTuple_GetItem(entry, 1);
        Py_hash_t h = PyObject_Hash(dest);
        if (h == -1)
            return NULL;
        PyObject *key = PyLong_FromSsize_t(h);
        if (key == NULL)
            return NULL;
        int known = PySet_Contains(seen, key);
        int added = known < 0 ? -1 : PySet_Add(known ? suspects : seen, key);
        Py_DECREF(key);
        if (added < 0)
            return NULL;
        Py_ssize_t n = PyUnicode_GetLength(dest);
        Py_ssize_t slash = PyUnicode_FindChar(dest, '/', 0, n, -1);
        if (slash == -2)
            return NULL;
        PyObject *parent = PyUnicode_Substring(dest, 0, slash < 0 ? 0 : slash);
        if (parent == NULL)
            return NULL;
        added = PySet_Add(parents, parent);
        Py_DECREF(parent);
        if (added < 0)
            return NULL;
    }
    Py_RETURN_NONE;
}

PyDoc_STRVAR(names_in_doc,
"names_in(paths, directory, /) -> list[str] | None\n\n"
"The names of ``paths`` (a list of str) when every one of them lies directly in ``directory``\n"
"(``directory + '/' + name``, the name non-empty and without '/'), in order; else None.");

/* The directory fast path's mirror check (move_directories.py), one pass instead of a Python
 * loop over every file of a directory. */
static PyObject *
names_in(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 2 || !PyList_CheckExact(args[0]) || !PyUnicode_CheckExact(args[1])) {
        PyErr_SetString(PyExc_TypeError, "names_in(list, str) takes two arguments");
        return NULL;
    }
    PyObject *paths = args[0], *directory = args[1];
    Py_ssize_t k = PyUnicode_GetLength(directory), n = PyList_Size(paths);
    PyObject *out = PyList_New(n);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *path = PyList_GetItem(paths, i);
        if (!PyUnicode_CheckExact(path))
            goto decline;
        Py_ssize_t len = PyUnicode_GetLength(path);
        if (len < k + 2 || PyUnicode_ReadChar(path, k) != '/')
            goto decline;
        Py_ssize_t head = PyUnicode_Tailmatch(path, directory, 0, k, -1);
        Py_ssize_t slash = head == 1 ? PyUnicode_FindChar(path, '/', k + 1, len, 1) : -1;
        if (head == -1 || slash == -2)
            goto error;
        if (head != 1 || slash != -1)
            goto decline;
        PyObject *name = PyUnicode_Substring(path, k + 1, len);
        if (name == NULL)
            goto error;
        PyList_SetItem(out, i, name);  /* steals; cannot fail on a new list */
    }
    return out;
decline:
    Py_DECREF(out);
    Py_RETURN_NONE;
error:
    Py_DECREF(out);
    return NULL;
}

static PyMethodDef methods[] = {
    {"files", (PyCFunction)(void (*)(void))files, METH_FASTCALL, files_doc},
    {"directories", (PyCFunction)(void (*)(void))directories, METH_FASTCALL, directories_doc},
    {"note_destinations", (PyCFunction)(void (*)(void))note_destinations, METH_FASTCALL,
     note_destinations_doc},
    {"names_in", (PyCFunction)(void (*)(void))names_in, METH_FASTCALL, names_in_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_checks",
    .m_doc = "The whole-manifest entry checks of committer.job.untrusted, in C.",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC
PyInit__checks(void)
{
    KEY_s = PyUnicode_InternFromString("s");
    KEY_d = PyUnicode_InternFromString("d");
    KEY_z = PyUnicode_InternFromString("z");
    KEY_e = PyUnicode_InternFromString("e");
    KEY_t = PyUnicode_InternFromString("t");
    KEY_l = PyUnicode_InternFromString("l");
    if (!KEY_s || !KEY_d || !KEY_z || !KEY_e || !KEY_t || !KEY_l)
        return NULL;
    return PyModule_Create(&module_def);
}
