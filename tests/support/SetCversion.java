// Offline editor for a stopped ZooKeeper 3.8 server's data dir: sets one
// node's cversion, which is the counter ZooKeeper uses for the suffix of the
// next sequential child of that node.
//
// Usage: java -cp <zookeeper.jar>:<this dir> SetCversion DATADIR PATH CVERSION [container]
//   DATADIR   the server's dataDir (the folder that holds version-2/)
//   PATH      the node, e.g. /locks/orders; created (with missing ancestors as
//             persistent nodes) if absent; itself a container node if the 4th
//             argument is "container", otherwise persistent
//   CVERSION  any int32, including 2147483647 and -2147483648
//
// REQUIRES: the server that owns DATADIR is not running.  The tool loads the
// newest snapshot plus the transaction logs after it (the server's own restore
// path), edits the tree, and writes a new snapshot named after the last
// processed zxid, so the restarted server loads exactly this state: nodes,
// ephemerals and sessions (with their timeouts) are kept.
//
// Why digests are disabled here: 3.8 stores a tree digest next to a snapshot.
// The digest covers node stats and the server keeps it incrementally, so an
// edit of a stat behind its back would be reported as a digest mismatch on the
// next start.  Written without a digest, the snapshot is read back cleanly and
// the server recomputes the digest from the loaded nodes.
import java.io.File;
import java.util.List;
import org.apache.zookeeper.ZooDefs;
import org.apache.zookeeper.data.ACL;
import org.apache.zookeeper.server.DataNode;
import org.apache.zookeeper.server.DataTree;
import org.apache.zookeeper.server.ZKDatabase;
import org.apache.zookeeper.server.persistence.FileTxnSnapLog;

public final class SetCversion {
    private static final long CONTAINER_EPHEMERAL_OWNER = Long.MIN_VALUE;

    private SetCversion() {}

    public static void main(String[] args) throws Exception {
        if (args.length < 3 || args.length > 4) {
            System.err.println("usage: SetCversion DATADIR PATH CVERSION [container]");
            System.exit(2);
        }
        System.setProperty("zookeeper.digest.enabled", "false");
        File dataDir = new File(args[0]);
        String path = args[1];
        int cversion = Integer.parseInt(args[2]);
        boolean container = args.length == 4 && args[3].equals("container");
        if (!path.startsWith("/") || (path.length() > 1 && path.endsWith("/"))) {
            System.err.println("SetCversion: bad path " + path);
            System.exit(2);
        }

        FileTxnSnapLog snapLog = new FileTxnSnapLog(dataDir, dataDir);
        try {
            ZKDatabase db = new ZKDatabase(snapLog);
            db.loadDataBase();
            DataTree tree = db.getDataTree();
            long zxid = tree.lastProcessedZxid;
            long now = System.currentTimeMillis();
            List<ACL> acl = ZooDefs.Ids.OPEN_ACL_UNSAFE;

            // Create missing ancestors (persistent) and the node itself.
            int from = 1;
            while (true) {
                int slash = path.indexOf('/', from);
                String prefix = slash < 0 ? path : path.substring(0, slash);
                if (tree.getNode(prefix) == null) {
                    boolean last = slash < 0;
                    long owner = (last && container) ? CONTAINER_EPHEMERAL_OWNER : 0L;
                    // parentCVersion -1: bump the parent's cversion as a real create would.
                    tree.createNode(prefix, new byte[0], acl, owner, -1, zxid, now);
                }
                if (slash < 0) {
                    break;
                }
                from = slash + 1;
            }

            DataNode node = tree.getNode(path);
            int before;
            synchronized (node) {
                before = node.stat.getCversion();
                node.stat.setCversion(cversion);
            }
            snapLog.save(tree, db.getSessionWithTimeOuts(), true);
            System.out.println("SetCversion: " + path + " cversion " + before + " -> " + cversion
                    + " at zxid 0x" + Long.toHexString(zxid));
        } finally {
            snapLog.close();
        }
    }
}
