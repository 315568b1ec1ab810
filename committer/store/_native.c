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
 * The directory fast path's proof is here for the same reason: that a directory holds exactly
 * a task's files is one stat per file, hundreds of thousands in a large commit.
 *
 * Optional: built when a compiler is present (setup.py), otherwise LocalStore uses its
 * ctypes loop with the same behaviour. Linux only (renameat2, unlinkat).
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
 * pointer is into the str itself; any other is encoded as os.fsencode would, into `keep`. The
 * caller keeps `paths` (and `keep`) alive while the pointers are used. */
static const char **
paths_of(PyObject *paths, Py_ssize_t item, Py_ssize_t cut, PyObject *keep)
{
    Py_ssize_t n = PyList_GET_SIZE(paths);
    const char **out = PyMem_Malloc(sizeof(char *) * (size_t)(n > 0 ? n : 1));
    if (out == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *s = PyList_GET_ITEM(paths, i);
        if (item >= 0) {  /* a list of tuples: take their item `item` */
            if (!PyTuple_CheckExact(s) || PyTuple_GET_SIZE(s) <= item) {
                PyErr_SetString(PyExc_TypeError, "entries must be tuples of paths");
                goto fail;
            }
            s = PyTuple_GET_ITEM(s, item);
        }
        if (!PyUnicode_CheckExact(s)) {
            PyErr_SetString(PyExc_TypeError, "paths must be str");
            goto fail;
        }
        Py_ssize_t len = PyUnicode_GET_LENGTH(s);
        if (cut < 0 || cut > len) {
            PyErr_SetString(PyExc_ValueError, "a path is shorter than its directory");
            goto fail;
        }
        const char *p;
        Py_ssize_t bytes;
        if (PyUnicode_IS_ASCII(s)) {
            p = (const char *)PyUnicode_DATA(s) + cut;
            bytes = len - cut;
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
            p = PyBytes_AS_STRING(encoded);
            bytes = PyBytes_GET_SIZE(encoded);
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
    if (start < 0 || stop < start || stop > PyList_GET_SIZE(entries)) {
        PyErr_SetString(PyExc_ValueError, "start and stop must lie within the entries");
        return NULL;
    }
    if (PyList_GET_SIZE(fd_list) != stop - start) {
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
    Py_ssize_t n = PyList_GET_SIZE(todo), i = 0;
    dfds = PyMem_Malloc(sizeof(int) * (size_t)(n > 0 ? n : 1));
    if (dfds == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (i = 0; i < n; i++) {
        long fd = PyLong_AsLong(PyList_GET_ITEM(fd_list, i));
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
    PyObject *copy = PyList_GetSlice(paths, 0, PyList_GET_SIZE(paths));
    PyObject *keep = PyList_New(0);
    const char **p = NULL;
    PyObject *result = NULL;
    if (copy == NULL || keep == NULL || (p = paths_of(copy, -1, cut, keep)) == NULL)
        goto done;
    Py_ssize_t n = PyList_GET_SIZE(copy), removed = 0;
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
    PyObject *copy = PyList_GetSlice(names, 0, PyList_GET_SIZE(names));
    PyObject *keep = PyList_New(0);
    const char **p = NULL;
    long long *sizes = NULL;
    PyObject *result = NULL;
    if (copy == NULL || keep == NULL)
        goto done;
    Py_ssize_t n = PyList_GET_SIZE(copy);
    if (PyList_GET_SIZE(size_list) != n) {
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
        PyObject *z = PyList_GET_ITEM(size_list, i);
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

static PyMethodDef methods[] = {
    {"rename_into", rename_into, METH_VARARGS,
     "rename_into(entries, start, stop, src_dir_fd, src_cut, dst_dir_fds, flags)"
     " -> (index, errno)"},
    {"rmdir_paths", rmdir_paths, METH_VARARGS, "rmdir_paths(dir_fd, paths, cut) -> removed"},
    {"regular_files", regular_files, METH_VARARGS, "regular_files(dir_fd, names, sizes) -> count"},
    {"count_entries", count_entries, METH_VARARGS, "count_entries(dir_fd) -> count"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "committer.store._native",
    .m_doc = "The local-disk loops of the job commit (rename, rmdir, stat, count), without the GIL.",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC
PyInit__native(void)
{
    return PyModule_Create(&module);
}
