package cloudpeers;

import java.io.FileNotFoundException;
import java.io.IOException;
import java.io.OutputStream;
import java.io.RandomAccessFile;
import java.net.URI;
import java.nio.channels.Channels;
import java.nio.channels.FileChannel;
import java.nio.file.DirectoryNotEmptyException;
import java.nio.file.DirectoryStream;
import java.nio.file.FileVisitResult;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.NoSuchFileException;
import java.nio.file.Paths;
import java.nio.file.SimpleFileVisitor;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.nio.file.attribute.BasicFileAttributes;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.atomic.LongAdder;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FSInputStream;
import org.apache.hadoop.fs.FileAlreadyExistsException;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.ParentNotDirectoryException;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.PathIsNotEmptyDirectoryException;
import org.apache.hadoop.fs.impl.OpenFileParameters;
import org.apache.hadoop.fs.permission.FsPermission;
import org.apache.hadoop.util.Progressable;

/**
 * A Hadoop FileSystem ({@code simabfs://<account>/...}) over a local directory, every call of
 * which is answered as the simulated cloud account answers a request (see {@link ServiceModel}):
 * the ABFS request count of each call (a rename, a mkdirs, a recursive delete, a
 * getFileStatus: one request each on a hierarchical-namespace account, a rename a copy and a
 * delete on a flat one ({@link #SERVICE_KEY}); a listing: one per page
 * of 5,000; an open: a HEAD unless the caller passes the status; a read: one GET per 4 MiB
 * block; a create: one, and its close one append per 8 MiB written plus a flush), the
 * account's latency and throttle, and ABFS's own rename rate limit
 * ({@code fs.azure.io.rate.limit}, default 1,000 per second) on renames.
 *
 * <p>No state per file is held: the local directory is the namespace. A recursive delete
 * moves the local tree aside (one rename) and {@link #emptyTrash} removes it later, so the
 * local disk's time to remove many entries is not charged to the service.
 */
public class SimAbfsFileSystem extends FileSystem {
    public static final String SCHEME = "simabfs";
    /** The local directory that holds the account's namespace. */
    public static final String ROOT_KEY = "fs.simabfs.local.root";
    /** ABFS's client-side rate limit on renames, permits per second; 0 = none. */
    public static final String RATE_LIMIT_KEY = "fs.azure.io.rate.limit";
    public static final int RATE_LIMIT_DEFAULT = 1_000;
    /**
     * The service whose request costs are charged: {@code adls} (a hierarchical namespace, the
     * default), {@code blob} (ABFS over a flat-namespace account) or {@code gcs} (the GCS
     * connector). On the flat two a rename is a copy then a delete, and a getFileStatus that
     * finds no object also lists the prefix (a missing path; on GCS any directory, on Blob
     * the directory's marker blob answers the HEAD).
     */
    public static final String SERVICE_KEY = "fs.simabfs.service";
    public static final List<String> SERVICES = List.of("adls", "blob", "gcs");
    static final int LIST_PAGE = 5_000;
    static final long READ_BLOCK = 4L << 20;
    static final long WRITE_BLOCK = 8L << 20;

    private static final LongAdder RENAME_WAIT_NS = new LongAdder();

    private final ServiceModel model = ServiceModel.INSTANCE;
    private URI uri;
    private java.nio.file.Path root;
    private java.nio.file.Path trash;
    private Path workingDir;
    private RenameLimiter renames;
    private String service;

    @Override
    public void initialize(URI name, Configuration conf) throws IOException {
        super.initialize(name, conf);
        setConf(conf);
        String local = conf.get(ROOT_KEY);
        if (local == null || local.isEmpty()) {
            throw new IOException(ROOT_KEY + " is not set: the local directory of " + name);
        }
        uri = URI.create(SCHEME + "://" + name.getAuthority());
        root = Paths.get(local).toAbsolutePath().normalize();
        Files.createDirectories(root);
        trash = root.resolveSibling(root.getFileName() + ".trash");
        workingDir = new Path(uri.toString() + "/");
        renames = new RenameLimiter(conf.getInt(RATE_LIMIT_KEY, RATE_LIMIT_DEFAULT));
        service = conf.getTrimmed(SERVICE_KEY, "adls");
        if (!SERVICES.contains(service)) {
            throw new IOException(SERVICE_KEY + ": expected one of " + SERVICES + ", got "
                + service);
        }
    }

    @Override
    public String getScheme() {
        return SCHEME;
    }

    @Override
    public URI getUri() {
        return uri;
    }

    /** The local file behind {@code p}. */
    public java.nio.file.Path localPath(Path p) {
        String path = makeQualified(p).toUri().getPath();
        java.nio.file.Path out = root.resolve(path.startsWith("/") ? path.substring(1) : path)
            .normalize();
        if (!out.startsWith(root)) {
            throw new IllegalArgumentException(p + " is outside the account");
        }
        return out;
    }

    private Path remote(java.nio.file.Path local) {
        String rel = root.relativize(local).toString().replace('\\', '/');
        return new Path(uri.getScheme(), uri.getAuthority(), "/" + rel);
    }

    private static FileStatus status(java.nio.file.Path local, Path qualified) throws IOException {
        BasicFileAttributes a;
        try {
            a = Files.readAttributes(local, BasicFileAttributes.class, LinkOption.NOFOLLOW_LINKS);
        } catch (NoSuchFileException e) {
            throw new FileNotFoundException(qualified + ": no such file or directory");
        }
        boolean dir = a.isDirectory();
        return new FileStatus(dir ? 0 : a.size(), dir, 1, 256L << 20,
            a.lastModifiedTime().toMillis(), qualified);
    }

    /** A flat namespace (Blob without hierarchical namespace, GCS): no server-side rename. */
    private boolean flat() {
        return !"adls".equals(service);
    }

    @Override
    public FileStatus getFileStatus(Path f) throws IOException {
        Path q = makeQualified(f);
        java.nio.file.Path local = localPath(q);
        if (!flat()) {
            return model.call("getFileStatus", () -> status(local, q));
        }
        // an object HEAD first; when it finds no object, a list of the prefix decides between
        // a directory and nothing. Blob keeps a marker blob for each directory ABFS made (the
        // HEAD finds it); GCS's connector lists for any directory
        FileStatus head = model.call("getFileStatus", () -> {
            try {
                return status(local, q);
            } catch (FileNotFoundException e) {
                return null;
            }
        });
        if (head != null && !(head.isDirectory() && "gcs".equals(service))) {
            return head;
        }
        FileStatus listed = model.call("listPrefix", () -> {
            try {
                return status(local, q);
            } catch (FileNotFoundException e) {
                return null;
            }
        });
        if (listed == null) {
            throw new FileNotFoundException(q + ": no such file or directory");
        }
        return listed;
    }

    @Override
    public FileStatus[] listStatus(Path f) throws IOException {
        Path q = makeQualified(f);
        java.nio.file.Path local = localPath(q);
        FileStatus[] out = model.call("listStatus", () -> {
            FileStatus self = status(local, q);
            if (!self.isDirectory()) {
                return new FileStatus[] {self};
            }
            List<FileStatus> found = new ArrayList<>();
            try (DirectoryStream<java.nio.file.Path> entries = Files.newDirectoryStream(local)) {
                for (java.nio.file.Path e : entries) {
                    try {
                        found.add(status(e, remote(e)));
                    } catch (FileNotFoundException gone) {
                        // removed while listing: not part of the answer
                    }
                }
            }
            return found.toArray(new FileStatus[0]);
        });
        // one more request per further page of the listing
        for (int page = 1; page * LIST_PAGE < out.length; page++) {
            model.call("listStatus", () -> null);
        }
        return out;
    }

    @Override
    public boolean mkdirs(Path f, FsPermission permission) throws IOException {
        Path q = makeQualified(f);
        java.nio.file.Path local = localPath(q);
        return model.call("mkdirs", () -> {
            for (java.nio.file.Path p = local; p != null && p.startsWith(root); p = p.getParent()) {
                if (Files.exists(p, LinkOption.NOFOLLOW_LINKS)) {
                    if (!Files.isDirectory(p, LinkOption.NOFOLLOW_LINKS)) {
                        if (p.equals(local)) {
                            throw new FileAlreadyExistsException(q + " is a file");
                        }
                        throw new ParentNotDirectoryException(remote(p) + " is a file");
                    }
                    break;
                }
            }
            Files.createDirectories(local);
            return true;
        });
    }

    @Override
    public boolean rename(Path src, Path dst) throws IOException {
        Path qs = makeQualified(src);
        Path qd = makeQualified(dst);
        java.nio.file.Path from = localPath(qs);
        java.nio.file.Path to = localPath(qd);
        if (model.enabled()) {
            RENAME_WAIT_NS.add(renames.acquire());
        }
        if (flat()) {
            // no rename on the service: a server-side copy, then, once it is answered, the
            // source's delete (two dependent requests). The local move is done by the copy.
            boolean copied = model.call("copy", () -> moveLocal(from, to));
            if (copied) {
                model.call("delete", () -> null);
            }
            return copied;
        }
        return model.call("rename", () -> moveLocal(from, to));
    }

    /** The rename's effect on the local directory; false where a rename would fail. */
    private boolean moveLocal(java.nio.file.Path from, java.nio.file.Path to) throws IOException {
        if (!Files.exists(from, LinkOption.NOFOLLOW_LINKS) || from.equals(root)) {
            return false;
        }
        java.nio.file.Path target = to;
        if (Files.isDirectory(target, LinkOption.NOFOLLOW_LINKS)) {
            target = target.resolve(from.getFileName());
        }
        if (target.equals(from)) {
            return true;
        }
        if (Files.exists(target, LinkOption.NOFOLLOW_LINKS) || target.startsWith(from)
            || !Files.isDirectory(target.getParent())) {
            return false;
        }
        try {
            Files.move(from, target, StandardCopyOption.ATOMIC_MOVE);
        } catch (NoSuchFileException e) {
            return false;
        }
        return true;
    }

    @Override
    public boolean delete(Path f, boolean recursive) throws IOException {
        Path q = makeQualified(f);
        java.nio.file.Path local = localPath(q);
        return model.call("delete", () -> {
            if (!Files.exists(local, LinkOption.NOFOLLOW_LINKS)) {
                return false;
            }
            if (!Files.isDirectory(local, LinkOption.NOFOLLOW_LINKS)) {
                Files.deleteIfExists(local);
                return true;
            }
            if (!recursive) {
                try {
                    Files.delete(local);
                    return true;
                } catch (DirectoryNotEmptyException e) {
                    throw new PathIsNotEmptyDirectoryException(q.toString());
                }
            }
            // one request however large the tree (a hierarchical namespace deletes it
            // server-side): the local tree is moved aside at once, and removed after the
            // timed commit (emptyTrash), so local disk time is not counted as the service's
            Files.createDirectories(trash);
            Files.move(local, trash.resolve(java.util.UUID.randomUUID().toString()),
                StandardCopyOption.ATOMIC_MOVE);
            return true;
        });
    }

    /** Removes the trees deleted so far (untimed). */
    public void emptyTrash() throws IOException {
        if (Files.exists(trash)) {
            deleteTree(trash);
        }
    }

    private static void deleteTree(java.nio.file.Path top) throws IOException {
        Files.walkFileTree(top, new SimpleFileVisitor<java.nio.file.Path>() {
            @Override
            public FileVisitResult visitFile(java.nio.file.Path file, BasicFileAttributes a)
                    throws IOException {
                Files.deleteIfExists(file);
                return FileVisitResult.CONTINUE;
            }

            @Override
            public FileVisitResult postVisitDirectory(java.nio.file.Path dir, IOException e)
                    throws IOException {
                Files.deleteIfExists(dir);
                return FileVisitResult.CONTINUE;
            }
        });
    }

    @Override
    public FSDataInputStream open(Path f, int bufferSize) throws IOException {
        FileStatus st = getFileStatus(f);  // ABFS's open asks for the path's status: a HEAD
        return openWith(st);
    }

    @Override
    protected CompletableFuture<FSDataInputStream> openFileWithOptions(
            Path path, OpenFileParameters parameters) throws IOException {
        CompletableFuture<FSDataInputStream> result = new CompletableFuture<>();
        try {
            FileStatus given = parameters.getStatus();
            // ABFS skips its HEAD when the caller passes the file's status (openFile builder)
            result.complete(given != null && !given.isDirectory() ? openWith(given)
                : open(path, parameters.getBufferSize()));
        } catch (IOException | RuntimeException e) {
            result.completeExceptionally(e);
        }
        return result;
    }

    private FSDataInputStream openWith(FileStatus st) throws IOException {
        if (st.isDirectory()) {
            throw new FileNotFoundException(st.getPath() + " is a directory");
        }
        java.nio.file.Path local = localPath(st.getPath());
        RandomAccessFile file;
        try {
            file = new RandomAccessFile(local.toFile(), "r");
        } catch (FileNotFoundException e) {
            throw new FileNotFoundException(st.getPath() + ": no such file");
        }
        return new FSDataInputStream(new SimInputStream(file, model));
    }

    @Override
    public FSDataOutputStream create(Path f, FsPermission permission, boolean overwrite,
                                     int bufferSize, short replication, long blockSize,
                                     Progressable progress) throws IOException {
        return createFile(f, overwrite, true);
    }

    @Override
    public FSDataOutputStream createNonRecursive(Path f, FsPermission permission,
                                                 boolean overwrite, int bufferSize,
                                                 short replication, long blockSize,
                                                 Progressable progress) throws IOException {
        return createFile(f, overwrite, false);
    }

    private FSDataOutputStream createFile(Path f, boolean overwrite, boolean parents)
            throws IOException {
        Path q = makeQualified(f);
        java.nio.file.Path local = localPath(q);
        FileChannel channel = model.call("create", () -> {
            if (Files.isDirectory(local, LinkOption.NOFOLLOW_LINKS)) {
                throw new FileAlreadyExistsException(q + " is a directory");
            }
            if (!overwrite && Files.exists(local, LinkOption.NOFOLLOW_LINKS)) {
                throw new FileAlreadyExistsException(q + " exists");
            }
            java.nio.file.Path parent = local.getParent();
            if (!Files.isDirectory(parent)) {
                if (!parents) {
                    throw new FileNotFoundException(q.getParent() + ": no such directory");
                }
                Files.createDirectories(parent);
            }
            return FileChannel.open(local, StandardOpenOption.CREATE, StandardOpenOption.WRITE,
                StandardOpenOption.TRUNCATE_EXISTING);
        });
        return new FSDataOutputStream(new SimOutputStream(channel, model), statistics);
    }

    @Override
    public FSDataOutputStream append(Path f, int bufferSize, Progressable progress)
            throws IOException {
        throw new IOException("append is not supported by " + SCHEME);
    }

    @Override
    public void setWorkingDirectory(Path dir) {
        workingDir = makeQualified(dir);
    }

    @Override
    public Path getWorkingDirectory() {
        return workingDir;
    }

    /** Seconds spent waiting for the rename rate limit, all instances. */
    static double renameWaitSeconds() {
        return RENAME_WAIT_NS.sum() / 1e9;
    }

    static void resetRenameWait() {
        RENAME_WAIT_NS.reset();
    }

    /**
     * Reads as the ABFS input stream does: one GET per 4 MiB block it enters, the block then
     * served from memory (the callers read a byte at a time).
     */
    private static final class SimInputStream extends FSInputStream {
        private final RandomAccessFile file;
        private final ServiceModel model;
        private final long length;
        private long pos;
        private long bufferStart = -1;
        private byte[] buffer = new byte[0];

        SimInputStream(RandomAccessFile file, ServiceModel model) throws IOException {
            this.file = file;
            this.model = model;
            this.length = file.length();
        }

        /** Bytes available from {@code pos} in the buffer (fetching its block), -1 at EOF. */
        private int fill() throws IOException {
            if (pos >= length) {
                return -1;
            }
            long start = pos - pos % READ_BLOCK;
            if (start != bufferStart) {
                int size = (int) Math.min(READ_BLOCK, length - start);
                byte[] block = new byte[size];
                model.call("read", () -> {
                    file.seek(start);
                    file.readFully(block);
                    return null;
                });
                buffer = block;
                bufferStart = start;
            }
            return (int) (bufferStart + buffer.length - pos);
        }

        @Override
        public synchronized int read() throws IOException {
            if (fill() < 0) {
                return -1;
            }
            return buffer[(int) (pos++ - bufferStart)] & 0xff;
        }

        @Override
        public synchronized int read(byte[] buf, int off, int len) throws IOException {
            if (len == 0) {
                return 0;
            }
            int n = fill();
            if (n < 0) {
                return -1;
            }
            n = Math.min(n, len);
            System.arraycopy(buffer, (int) (pos - bufferStart), buf, off, n);
            pos += n;
            return n;
        }

        @Override
        public synchronized void seek(long to) throws IOException {
            if (to < 0) {
                throw new IOException("negative seek: " + to);
            }
            pos = to;
        }

        @Override
        public synchronized long getPos() {
            return pos;
        }

        @Override
        public boolean seekToNewSource(long target) {
            return false;
        }

        @Override
        public int available() {
            return (int) Math.min(Integer.MAX_VALUE, Math.max(0, length - pos));
        }

        @Override
        public void close() throws IOException {
            buffer = new byte[0];
            file.close();
        }
    }

    /** Writes locally; on close, one append request per 8 MiB written, then a flush. */
    private static final class SimOutputStream extends OutputStream {
        private final FileChannel channel;
        private final OutputStream out;
        private final ServiceModel model;
        private long written;
        private boolean closed;

        SimOutputStream(FileChannel channel, ServiceModel model) {
            this.channel = channel;
            this.out = Channels.newOutputStream(channel);
            this.model = model;
        }

        @Override
        public void write(int b) throws IOException {
            out.write(b);
            written++;
        }

        @Override
        public void write(byte[] b, int off, int len) throws IOException {
            out.write(b, off, len);
            written += len;
        }

        @Override
        public void close() throws IOException {
            if (closed) {
                return;
            }
            closed = true;
            for (long sent = 0; sent < written; sent += WRITE_BLOCK) {
                model.call("append", () -> null);
            }
            model.call("flush", () -> {
                channel.close();
                return null;
            });
        }
    }
}
