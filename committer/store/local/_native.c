/* The local-disk loops of the job commit (rename, rmdir, stat, count), without the GIL.
 *
 * A Python loop over os calls releases and retakes the GIL around every call: with the job
 * commit's 32 threads on 2 CPUs, those hand-offs (futex wake-ups and context switches) cost
 * more than the renames themselves. These loops take a whole batch of paths with the length
 * of their common source directory (and, for renames, the open directory of each
 * destination, which the caller resolved without following symbolic links), find each
 * relative path (in place for ASCII, encoded otherwise), release the GIL once, and make one
 * system call per entry.
 *
 * The directory fast path's proof and the identities of sources whose manifest gives none are
 * here for the same reason: each is one stat per file, hundreds of thousands in a large commit.
 *
 * Optional: built when a compiler is present (setup.py), otherwise LocalStore uses its
 * ctypes loop with the same behaviour. Linux only (renameat2, unlinkat). Written to the limited
 * API of Python 3.10 (setup.py defines Py_LIMITED_API), so one build (abi3) loads on every
 * CPython from 3.10 on: lists, tuples, strs and bytes are read through functions, not the
 * macros that read their structs.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef AT_REMOVEDIR
#define AT_REMOVEDIR 0x200
#endif

static int
do_renameat2(int sfd, const char *src, int dfd, const char *dst, unsigned int flags)
{
#ifdef SYS_renameat2
    return (int)syscall(SYS_renameat2, sfd, src, dfd, dst, flags);
#else
    errno = ENOSYS;
    return -1;
#endif
}

/* The char pointers of paths[i][cut:] for the exact strs of a list, NULL (exception set) if
 * one is not an exact str, is shorter than cut or holds a NUL (the kernel would read a shorter
 * path than the caller meant). An ASCII str's characters are its bytes, NUL-terminated, so its
 * pointer is into the str itself (PyUnicode_AsUTF8AndSize hands out an ASCII str's own
 * buffer); any other is encoded as os.fsencode would, into `keep`. The caller keeps `paths`
 * (and `keep`) alive while the pointers are used. */
static const char **
paths_of(PyObject *paths, Py_ssize_t item, Py_ssize_t cut, PyObject *keep)
{
    Py_ssize_t n = PyList_Size(paths);
    const char **out = PyMem_Malloc(sizeof(char *) * (size_t)(n > 0 ? n : 1));
    if (out == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *s = PyList_GetItem(paths, i);
        if (item >= 0) {  /* a list of tuples: take their item `item` */
            if (!PyTuple_CheckExact(s) || PyTuple_Size(s) <= item) {
                PyErr_SetString(PyExc_TypeError, "entries must be tuples of paths");
                goto fail;
            }
            s = PyTuple_GetItem(s, item);
        }
        if (!PyUnicode_CheckExact(s)) {
            PyErr_SetString(PyExc_TypeError, "paths must be str");
            goto fail;
        }
        Py_ssize_t len = PyUnicode_GetLength(s);
        if (cut < 0 || cut > len) {
            PyErr_SetString(PyExc_ValueError, "a path is shorter than its directory");
            goto fail;
        }
        Py_ssize_t bytes;
        const char *p = PyUnicode_AsUTF8AndSize(s, &bytes);
        if (p == NULL)  /* a lone surrogate (an undecodable byte): os.fsencode decides */
            PyErr_Clear();
        if (p != NULL && bytes == len) {  /* ASCII */
            p += cut;
            bytes -= cut;
        } else {
            PyObject *rest = PyUnicode_Substring(s, cut, len);
            PyObject *encoded = rest == NULL ? NULL : PyUnicode_EncodeFSDefault(rest);
            Py_XDECREF(rest);
            if (encoded == NULL)
                goto fail;
            int kept = PyList_Append(keep, encoded);
            Py_DECREF(encoded);  /* `keep` holds it */
            if (kept < 0)
                goto fail;
            char *data;
            if (PyBytes_AsStringAndSize(encoded, &data, &bytes) < 0)
                goto fail;
            p = data;
        }
        if ((Py_ssize_t)strlen(p) != bytes) {
            PyErr_SetString(PyExc_ValueError, "embedded NUL in a path");
            goto fail;
        }
        out[i] = p;
    }
    return out;
fail:
    PyMem_Free(out);
    return NULL;
}

/* rename_into(entries, start, stop, src_dir_fd, src_cut, dst_dir_fds, flags) -> (index, errno)
 * Renames entry[0][src_cut:] (relative to src_dir_fd) to the last component of entry[1]
 * (relative to dst_dir_fds[i - start], the open directory holding that destination) for each
 * entry i from `start` up to `stop`, in order, and stops at the first failure: returns the
 * index of the first entry not renamed (`stop`: all were) and that failure's errno (0: none;
 * -1: its directory fd is negative, i.e. the caller could not open that directory). */
static PyObject *
rename_into(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *entries, *fd_list;
    Py_ssize_t start, stop, s_cut;
    int sfd;
    unsigned int flags;
    if (!PyArg_ParseTuple(args, "O!nnin" "O!I", &PyList_Type, &entries, &start, &stop, &sfd,
                          &s_cut, &PyList_Type, &fd_list, &flags))
        return NULL;
    if (start < 0 || stop < start || stop > PyList_Size(entries)) {
        PyErr_SetString(PyExc_ValueError, "start and stop must lie within the entries");
        return NULL;
    }
    if (PyList_Size(fd_list) != stop - start) {
        PyErr_SetString(PyExc_ValueError, "one directory fd is needed per entry");
        return NULL;
    }
    /* a private copy keeps the tuples (so their strs) alive and the list's contents fixed */
    PyObject *todo = PyList_GetSlice(entries, start, stop);
    PyObject *keep = PyList_New(0);
    const char **s = NULL, **d = NULL;
    int *dfds = NULL;
    PyObject *result = NULL;
    if (todo == NULL || keep == NULL)
        goto done;
    if ((s = paths_of(todo, 0, s_cut, keep)) == NULL ||
        (d = paths_of(todo, 1, 0, keep)) == NULL)
        goto done;
    Py_ssize_t n = PyList_Size(todo), i = 0;
    dfds = PyMem_Malloc(sizeof(int) * (size_t)(n > 0 ? n : 1));
    if (dfds == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (i = 0; i < n; i++) {
        long fd = PyLong_AsLong(PyList_GetItem(fd_list, i));
        if (fd == -1 && PyErr_Occurred())
            goto done;
        dfds[i] = fd < 0 || fd > INT_MAX ? -1 : (int)fd;
        const char *slash = strrchr(d[i], '/');
        d[i] = slash == NULL ? d[i] : slash + 1;  /* the name within its directory */
    }
    int err = 0;
    i = 0;
    Py_BEGIN_ALLOW_THREADS
    for (; i < n; i++) {
        if (dfds[i] < 0) {
            err = -1;
            break;
        }
        if (do_renameat2(sfd, s[i], dfds[i], d[i], flags) != 0) {
            err = errno;
            break;
        }
    }
    Py_END_ALLOW_THREADS
    result = Py_BuildValue("ni", start + i, err);
done:
    PyMem_Free(s);
    PyMem_Free(d);
    PyMem_Free(dfds);
    Py_XDECREF(todo);
    Py_XDECREF(keep);
    return result;
}

/* rmdir_paths(dir_fd, paths, cut) -> removed
 * Removes each directory paths[i][cut:] (relative to dir_fd) in order; one that is missing,
 * not empty or otherwise not removable is skipped. Returns how many were removed. */
static PyObject *
rmdir_paths(PyObject *self, PyObject *args)
{
    (void)self;
    int fd;
    PyObject *paths;
    Py_ssize_t cut;
    if (!PyArg_ParseTuple(args, "iO!n", &fd, &PyList_Type, &paths, &cut))
        return NULL;
    PyObject *copy = PyList_GetSlice(paths, 0, PyList_Size(paths));
    PyObject *keep = PyList_New(0);
    const char **p = NULL;
    PyObject *result = NULL;
    if (copy == NULL || keep == NULL || (p = paths_of(copy, -1, cut, keep)) == NULL)
        goto done;
    Py_ssize_t n = PyList_Size(copy), removed = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        if (unlinkat(fd, p[i], AT_REMOVEDIR) == 0)
            removed++;
    }
    Py_END_ALLOW_THREADS
    result = PyLong_FromSsize_t(removed);
done:
    PyMem_Free(p);
    Py_XDECREF(copy);
    Py_XDECREF(keep);
    return result;
}

/* regular_files(dir_fd, names, sizes) -> count
 * How many of names[i] (relative to dir_fd, never followed if a link) are regular files of
 * sizes[i] bytes (None or a negative size: any). */
static PyObject *
regular_files(PyObject *self, PyObject *args)
{
    (void)self;
    int fd;
    PyObject *names, *size_list;
    if (!PyArg_ParseTuple(args, "iO!O!", &fd, &PyList_Type, &names, &PyList_Type, &size_list))
        return NULL;
    PyObject *copy = PyList_GetSlice(names, 0, PyList_Size(names));
    PyObject *keep = PyList_New(0);
    const char **p = NULL;
    long long *sizes = NULL;
    PyObject *result = NULL;
    if (copy == NULL || keep == NULL)
        goto done;
    Py_ssize_t n = PyList_Size(copy);
    if (PyList_Size(size_list) != n) {
        PyErr_SetString(PyExc_ValueError, "one size is needed per name");
        goto done;
    }
    if ((p = paths_of(copy, -1, 0, keep)) == NULL)
        goto done;
    sizes = PyMem_Malloc(sizeof(long long) * (size_t)(n > 0 ? n : 1));
    if (sizes == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *z = PyList_GetItem(size_list, i);
        sizes[i] = z == Py_None ? -1 : PyLong_AsLongLong(z);
        if (sizes[i] == -1 && PyErr_Occurred())
            goto done;
    }
    Py_ssize_t found = 0;
    Py_BEGIN_ALLOW_THREADS
    struct stat st;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (fstatat(fd, p[i], &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode)
                && (sizes[i] < 0 || (long long)st.st_size == sizes[i]))
            found++;
    }
    Py_END_ALLOW_THREADS
    result = PyLong_FromSsize_t(found);
done:
    PyMem_Free(p);
    PyMem_Free(sizes);
    Py_XDECREF(copy);
    Py_XDECREF(keep);
    return result;
}

/* count_entries(dir_fd) -> count
 * How many children the directory has (".." and "." not counted); OSError if it cannot be
 * read. dir_fd stays open and its position is untouched (a new open description is read). */
static PyObject *
count_entries(PyObject *self, PyObject *args)
{
    (void)self;
    int fd;
    if (!PyArg_ParseTuple(args, "i", &fd))
        return NULL;
    Py_ssize_t count = 0;
    int err = 0;
    Py_BEGIN_ALLOW_THREADS
    int own = openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *dir = own < 0 ? NULL : fdopendir(own);
    if (dir == NULL) {
        err = errno;
        if (own >= 0)
            close(own);
    } else {
        struct dirent *e;
        errno = 0;
        while ((e = readdir(dir)) != NULL) {
            const char *n = e->d_name;
            if (!(n[0] == '.' && (n[1] == '\0' || (n[1] == '.' && n[2] == '\0'))))
                count++;
        }
        err = errno;
        closedir(dir);
    }
    Py_END_ALLOW_THREADS
    if (err != 0) {
        errno = err;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    return PyLong_FromSsize_t(count);
}

/* The identity of a local file as committer.store.local.file_etag spells it: inode,
 * modification time in nanoseconds and size, in hexadecimal, joined by '-'. */
static int
format_identity(char *buf, size_t cap, const struct stat *st)
{
    long long ns = (long long)st->st_mtim.tv_sec * 1000000000LL + (long long)st->st_mtim.tv_nsec;
    unsigned long long mag = ns < 0 ? 0ULL - (unsigned long long)ns : (unsigned long long)ns;
    return snprintf(buf, cap, "%llx-%s%llx-%llx", (unsigned long long)st->st_ino,
                    ns < 0 ? "-" : "", mag, (unsigned long long)st->st_size);
}

/* identify(dir_fd, entries, prefix) -> (entries, mismatches)
 * For each entry (source, destination, size, identity) whose identity is None: one fstatat of
 * the source below `prefix` (the path of dir_fd with a trailing slash; ValueError for a
 * source not below it) relative to dir_fd (the last component not followed if a link). A regular file
 * of the entry's size gives a new tuple with its identity (as file_etag); anything else leaves
 * the entry as it is and adds (index, size found) to the mismatches, the size None when the
 * source is missing or not a regular file. Entries that carry an identity are kept as they
 * are, unexamined. The stats run with the GIL released, once for the whole list. */
static PyObject *
identify(PyObject *self, PyObject *args)
{
    (void)self;
    int fd;
    PyObject *entries, *prefix;
    if (!PyArg_ParseTuple(args, "iO!U", &fd, &PyList_Type, &entries, &prefix))
        return NULL;
    Py_ssize_t cut = PyUnicode_GetLength(prefix);
    /* a private copy keeps the tuples (so their strs) alive and the list's contents fixed */
    PyObject *todo = PyList_GetSlice(entries, 0, PyList_Size(entries));
    PyObject *keep = PyList_New(0), *sources = PyList_New(0);
    PyObject *out = NULL, *bad = NULL, *result = NULL;
    const char **p = NULL;
    Py_ssize_t *index = NULL;
    long long *sizes = NULL;
    struct stat *found = NULL;
    int *ok = NULL;
    if (todo == NULL || keep == NULL || sources == NULL)
        goto done;
    Py_ssize_t n = PyList_Size(todo), m = 0;
    index = PyMem_Malloc(sizeof(Py_ssize_t) * (size_t)(n > 0 ? n : 1));
    sizes = PyMem_Malloc(sizeof(long long) * (size_t)(n > 0 ? n : 1));
    if (index == NULL || sizes == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *e = PyList_GetItem(todo, i);
        if (!PyTuple_CheckExact(e) || PyTuple_Size(e) != 4) {
            PyErr_SetString(PyExc_TypeError, "entries must be 4-tuples");
            goto done;
        }
        if (PyTuple_GetItem(e, 3) != Py_None)
            continue;
        long long z = PyLong_AsLongLong(PyTuple_GetItem(e, 2));
        if (z == -1 && PyErr_Occurred())
            goto done;
        PyObject *src = PyTuple_GetItem(e, 0);
        Py_ssize_t below = PyUnicode_Check(src)
            ? PyUnicode_Tailmatch(src, prefix, 0, PY_SSIZE_T_MAX, -1) : 0;
        if (below != 1) {
            if (below == 0)
                PyErr_SetString(PyExc_ValueError, "a source is not below the directory");
            goto done;
        }
        if (PyList_Append(sources, src) < 0)
            goto done;
        index[m] = i;
        sizes[m++] = z;
    }
    if ((p = paths_of(sources, -1, cut, keep)) == NULL)
        goto done;
    found = PyMem_Malloc(sizeof(struct stat) * (size_t)(m > 0 ? m : 1));
    ok = PyMem_Malloc(sizeof(int) * (size_t)(m > 0 ? m : 1));
    if (found == NULL || ok == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    /* A run of sources in one directory (a task's partition) is stat'ed relative to that
     * directory, opened once: the kernel then resolves one component per file, not all of
     * them (about a fifth of the time of a stat from the task attempts' root). Opening it
     * resolves the components a stat of the whole path would, links between them included. */
    int here = -1;
    const char *dir = NULL;
    size_t dir_len = 0;
    char *name_buf = NULL;
    size_t name_cap = 0;
    for (Py_ssize_t k = 0; k < m; k++) {
        const char *slash = strrchr(p[k], '/');
        size_t len = slash == NULL ? 0 : (size_t)(slash - p[k]);
        if (slash != NULL && !(here >= 0 && len == dir_len && memcmp(p[k], dir, len) == 0)
                && k + 1 < m && strncmp(p[k + 1], p[k], len + 1) == 0
                && strchr(p[k + 1] + len + 1, '/') == NULL) {
            if (here >= 0)
                close(here);
            here = -1;
            if (len + 1 > name_cap) {
                char *grown = realloc(name_buf, len + 1);
                if (grown != NULL) {
                    name_buf = grown;
                    name_cap = len + 1;
                }
            }
            if (len + 1 <= name_cap) {
                memcpy(name_buf, p[k], len);
                name_buf[len] = '\0';
                here = openat(fd, name_buf, O_PATH | O_DIRECTORY | O_CLOEXEC);
                dir = p[k];
                dir_len = len;
            }
        }
        if (slash != NULL && here >= 0 && len == dir_len && memcmp(p[k], dir, len) == 0)
            ok[k] = fstatat(here, slash + 1, &found[k], AT_SYMLINK_NOFOLLOW) == 0;
        else
            ok[k] = fstatat(fd, p[k], &found[k], AT_SYMLINK_NOFOLLOW) == 0;
    }
    if (here >= 0)
        close(here);
    free(name_buf);
    Py_END_ALLOW_THREADS
    if ((out = PyList_New(n)) == NULL || (bad = PyList_New(0)) == NULL)
        goto done;
    for (Py_ssize_t i = 0; i < n; i++)  /* every slot filled before anything can fail */
        PyList_SetItem(out, i, Py_NewRef(PyList_GetItem(todo, i)));  /* steals; cannot fail */
    char buf[80];
    for (Py_ssize_t k = 0; k < m; k++) {
        Py_ssize_t i = index[k];
        PyObject *e = PyList_GetItem(todo, i);
        int regular = ok[k] && S_ISREG(found[k].st_mode);
        if (!regular || (long long)found[k].st_size != sizes[k]) {
            PyObject *row = regular ? Py_BuildValue("(nL)", i, (long long)found[k].st_size)
                                    : Py_BuildValue("(nO)", i, Py_None);
            int appended = row == NULL ? -1 : PyList_Append(bad, row);
            Py_XDECREF(row);
            if (appended < 0)
                goto done;
            continue;
        }
        int len = format_identity(buf, sizeof buf, &found[k]);
        PyObject *ident = PyUnicode_FromStringAndSize(buf, len);
        PyObject *t = ident == NULL ? NULL : PyTuple_New(4);
        if (t == NULL) {
            Py_XDECREF(ident);
            goto done;
        }
        /* each steals its item (the list's the entry it replaces); none can fail here */
        for (int j = 0; j < 3; j++)
            PyTuple_SetItem(t, j, Py_NewRef(PyTuple_GetItem(e, j)));
        PyTuple_SetItem(t, 3, ident);
        PyList_SetItem(out, i, t);
    }
    result = PyTuple_Pack(2, out, bad);
done:
    PyMem_Free(p);
    PyMem_Free(index);
    PyMem_Free(sizes);
    PyMem_Free(found);
    PyMem_Free(ok);
    Py_XDECREF(todo);
    Py_XDECREF(keep);
    Py_XDECREF(sources);
    Py_XDECREF(out);
    Py_XDECREF(bad);
    return result;
}

static int
compare_names(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* holds_names(dir_fd, names, side_prefix, side_suffix) -> count
 * How many children the directory has, when each is a regular file (never a link) named in
 * `names` or, with a side prefix and suffix (str, or None for none), named prefix + one of
 * `names` + suffix (a file's side file), and every one of `names` is there; -1 otherwise. One
 * read of the directory, no stat per child (the kind comes from the directory entry, a stat
 * only where the filesystem does not say). `names` must not repeat a name. dir_fd stays open
 * and its position is untouched. */
static PyObject *
holds_names(PyObject *self, PyObject *args)
{
    (void)self;
    int fd;
    PyObject *names, *prefix_obj, *suffix_obj;
    if (!PyArg_ParseTuple(args, "iO!OO", &fd, &PyList_Type, &names, &prefix_obj, &suffix_obj))
        return NULL;
    PyObject *a = PyList_GetSlice(names, 0, PyList_Size(names));
    PyObject *keep = PyList_New(0);
    PyObject *pre = NULL, *suf = NULL;
    const char **wanted = NULL;
    char *inner = NULL;
    PyObject *result = NULL;
    if (a == NULL || keep == NULL)
        goto done;
    if ((prefix_obj == Py_None) != (suffix_obj == Py_None)) {
        PyErr_SetString(PyExc_ValueError, "a side file needs both a prefix and a suffix");
        goto done;
    }
    if (prefix_obj != Py_None) {
        if ((pre = PyUnicode_EncodeFSDefault(prefix_obj)) == NULL
                || (suf = PyUnicode_EncodeFSDefault(suffix_obj)) == NULL)
            goto done;
    }
    if ((wanted = paths_of(a, -1, 0, keep)) == NULL)
        goto done;
    Py_ssize_t nw = PyList_Size(a), count = 0, matched = 0;
    char *sp = NULL, *ss = NULL;
    Py_ssize_t np = 0, ns = 0;
    if ((pre != NULL && PyBytes_AsStringAndSize(pre, &sp, &np) < 0)
            || (suf != NULL && PyBytes_AsStringAndSize(suf, &ss, &ns) < 0))
        goto done;
    size_t lp = (size_t)np, ls = (size_t)ns;
    int err = 0, refused = 0;
    Py_BEGIN_ALLOW_THREADS
    qsort(wanted, (size_t)nw, sizeof(char *), compare_names);
    inner = malloc(NAME_MAX + 1);
    int own = inner == NULL ? -1 : openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *dir = own < 0 ? NULL : fdopendir(own);
    if (dir == NULL) {
        err = inner == NULL ? ENOMEM : errno;
        if (own >= 0)
            close(own);
    } else {
        struct dirent *e;
        errno = 0;
        while ((e = readdir(dir)) != NULL) {
            const char *n = e->d_name;
            if (n[0] == '.' && (n[1] == '\0' || (n[1] == '.' && n[2] == '\0')))
                continue;
            count++;
            int regular = e->d_type == DT_REG;
            if (e->d_type == DT_UNKNOWN) {
                struct stat st;
                regular = fstatat(dirfd(dir), n, &st, AT_SYMLINK_NOFOLLOW) == 0
                          && S_ISREG(st.st_mode);
            }
            size_t len = strlen(n);
            const char *key = n;
            if (!regular) {
                refused = 1;
            } else if (bsearch(&key, wanted, (size_t)nw, sizeof(char *), compare_names) != NULL) {
                matched++;
            } else if (sp != NULL && len > lp + ls && memcmp(n, sp, lp) == 0
                       && memcmp(n + len - ls, ss, ls) == 0) {
                memcpy(inner, n + lp, len - lp - ls);
                inner[len - lp - ls] = '\0';
                key = inner;
                if (bsearch(&key, wanted, (size_t)nw, sizeof(char *), compare_names) == NULL)
                    refused = 1;
            } else {
                refused = 1;
            }
            if (refused)
                break;
        }
        err = errno;
        closedir(dir);
    }
    Py_END_ALLOW_THREADS
    if (err != 0 && !refused) {
        errno = err;
        PyErr_SetFromErrno(PyExc_OSError);
        goto done;
    }
    result = PyLong_FromSsize_t(refused || matched != nw ? -1 : count);
done:
    PyMem_Free(wanted);
    free(inner);
    Py_XDECREF(a);
    Py_XDECREF(pre);
    Py_XDECREF(suf);
    Py_XDECREF(keep);
    return result;
}

static PyMethodDef methods[] = {
    {"rename_into", rename_into, METH_VARARGS,
     "rename_into(entries, start, stop, src_dir_fd, src_cut, dst_dir_fds, flags)"
     " -> (index, errno)"},
    {"rmdir_paths", rmdir_paths, METH_VARARGS, "rmdir_paths(dir_fd, paths, cut) -> removed"},
    {"regular_files", regular_files, METH_VARARGS, "regular_files(dir_fd, names, sizes) -> count"},
    {"count_entries", count_entries, METH_VARARGS, "count_entries(dir_fd) -> count"},
    {"identify", identify, METH_VARARGS, "identify(dir_fd, entries, prefix) -> (entries, mismatches)"},
    {"holds_names", holds_names, METH_VARARGS, "holds_names(dir_fd, names, side_prefix, side_suffix) -> count"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "committer.store.local._native",
    .m_doc = "The local-disk loops of the job commit (rename, rmdir, stat, count), without the GIL.",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC
PyInit__native(void)
{
    return PyModule_Create(&module);
}
