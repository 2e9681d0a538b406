package tidemark.jvm;

import java.util.HashSet;

import org.apache.spark.sql.api.java.UDF2;

/**
 * Proves, in one pass over a document's text, that {@code from_json} forgave nothing in it.
 *
 * <p>{@code call(text, spec)} returns the number of top-level properties of the document if
 * the text is a JSON object (JSON whitespace around it allowed) whose every property is
 * declared in {@code spec}, appears once, has an unescaped name and holds a value of the
 * declared kind <em>as a JSON token</em> (a string where a string is declared, not a number
 * that {@code from_json} would have turned into its text), with no {@code null} anywhere, no
 * unpaired surrogate escape and no raw control character in a string.  Otherwise it returns
 * -1, and the caller treats the document as a suspect, which the Python validator checks:
 * this class only ever shortens the common case.
 *
 * <p>A property declared nullable (kind {@code z}: a scalar of its type, or {@code null}; {@code R}
 * and {@code A}: a raw object or array, an array of scalars, or {@code null}) may hold
 * {@code null}: it is not counted, and its bit is set in the result's null mask.  The
 * result is a {@code long}: the count in its low 16 bits, then the mask, one bit per nullable
 * property in the order of {@code spec} (at most {@link #MAX_NULLABLE}); -1 if not plain.
 *
 * <p>The caller compares the count with the number of declared properties {@code from_json}
 * read as non-null, which proves that every property in the text was read, and reads from
 * the mask which nullable properties were written {@code null} (which {@code from_json}
 * reads as absent).
 *
 * <p>An object of declared members (kind {@code o}) holds only its declared members, each once,
 * each a scalar of its declared type: its entry's name is followed by U+0002 and the members'
 * entries (kind {@code s}; {@code q} for a member the object must hold), separated by U+0003.
 * An array of such objects: kind {@code l}.  A merged object's member of kind {@code c}
 * ({@code k}: required) is carried as written: {@code null} or its scalar type, or (types
 * {@code o}, {@code a}, {@code S} {@code I} {@code N} {@code B}) an object, an array, an array
 * of that scalar type, or ({@code O}, {@code L}) an object or an array of objects of declared
 * members (theirs after U+0002, separated by U+0006, proved as an object picked whole is); its
 * text is given back as an undeclared member's is (below).
 *
 * <p>A spec that starts with U+0004 allows undeclared top-level properties (the root of an
 * open schema, merged): each is any JSON value ({@code null} included), under a name without
 * escapes, once; it is not counted, and {@link #UNDECLARED} is set in the result.
 * {@link #undeclared} gives their text, {@code "name"} U+0000 value, separated by U+0001
 * ({@code UndeclaredMembers}, called only for documents with the bit set).  An object's
 * members' entries may start so too: its undeclared members are then allowed, and kept as
 * written (an object picked whole); with U+0005 instead they are allowed and given back as
 * well (a merged object: its entry's index, U+0002, then {@code "member"} U+0000 value).
 *
 * <p>{@code spec}: one entry per declared top-level property, separated by U+0001; an entry
 * is two characters, kind ({@code s} scalar, {@code z} nullable scalar, {@code r} raw, {@code a} array of, {@code m}
 * map of) and type ({@code s} string, {@code i} integer, {@code n} number, {@code b}
 * boolean, {@code o} object, {@code a} array; {@code d} a string of {@code format: date-time},
 * proved an RFC 3339 date-time as {@code tidemark.collection.formats} reads one, {@code D} the
 * same with at most {@code FRACTION_DIGITS} digits of fraction), then the property's name.
 */
public final class PlainDocument implements UDF2<String, String, Long> {
    private static final long serialVersionUID = 1L;
    private static final int MAX_DEPTH = 64;
    // digits of a date-time's fraction the combine's instant order compares
    // (tidemark.spark.datetimes.FRACTION_DIGITS)
    private static final int FRACTION_DIGITS = 18;
    /** The most nullable properties a spec may declare (the bits above the count). */
    static final int MAX_NULLABLE = 46;
    /** Set in the result where the document holds undeclared top-level properties (an open spec). */
    static final long UNDECLARED = 1L << 62;
    private static final int COUNT_BITS = 16;

    private static final class Spec {
        final String text;
        final String[] names;
        final int[][] byLength;  // name length -> indexes of the properties with names that long
        final char[] kinds;
        final char[] types;
        final int[] nullBit;  // a nullable property's bit in the result (-1: not nullable)
        final Spec[] members;  // an object's (kind ``o``) declared members, else null
        final boolean open;  // undeclared properties allowed (a spec that starts with U+0004 or U+0005)
        final boolean carried;  // ... and given back with their object's index (U+0005: a merged object's members)

        Spec(String text) {
            this(text, "\u0001");
        }

        Spec(String text, String separator) {
            this.text = text;
            carried = text.startsWith("\u0005");
            open = carried || text.startsWith("\u0004");
            if (open) {
                text = text.substring(1);
            }
            String[] entries = text.isEmpty() ? new String[0] : text.split(separator, -1);
            members = new Spec[entries.length];
            kinds = new char[entries.length];
            types = new char[entries.length];
            names = new String[entries.length];
            nullBit = new int[entries.length];
            if (entries.length >= (1 << COUNT_BITS)) {
                throw new IllegalArgumentException("too many properties");
            }
            int longest = 0;
            int nullable = 0;
            for (int i = 0; i < entries.length; i++) {
                kinds[i] = entries[i].charAt(0);
                nullBit[i] = kinds[i] == 'z' || kinds[i] == 'R' || kinds[i] == 'A' ? COUNT_BITS + nullable++ : -1;
                if (kinds[i] == 'R' || kinds[i] == 'A') {
                    kinds[i] = Character.toLowerCase(kinds[i]);  // a nullable object or array: null, else as its kind
                }
                types[i] = entries[i].charAt(1);
                names[i] = entries[i].substring(2);
                if (kinds[i] == 'o' || kinds[i] == 'l') {
                    int at = names[i].indexOf('\u0002');
                    members[i] = new Spec(names[i].substring(at + 1), "\u0003");
                    names[i] = names[i].substring(0, at);
                } else if (((kinds[i] == 'c' || kinds[i] == 'k') && (types[i] == 'O' || types[i] == 'L'))
                        || ((kinds[i] == 's' || kinds[i] == 'q') && types[i] == 'M')) {
                    // a member carried as written that is an object (an array of objects) of
                    // declared members, or a merged object member (M): theirs follow U+0002,
                    // separated by U+0006
                    int at = names[i].indexOf('\u0002');
                    // a merged object member's members: separated by its depth's mark (U+0006,
                    // U+0007 below the object's U+0003), a carried one's by U+0006
                    String inner = types[i] == 'M' && !separator.equals("\u0003")
                            ? String.valueOf((char) (separator.charAt(0) + 1))
                            : "\u0006";
                    members[i] = new Spec(names[i].substring(at + 1), inner);
                    names[i] = names[i].substring(0, at);
                }
                longest = Math.max(longest, names[i].length());
            }
            if (nullable > MAX_NULLABLE) {
                throw new IllegalArgumentException("too many nullable properties");
            }
            int[] counts = new int[longest + 1];
            for (String name : names) {
                counts[name.length()]++;
            }
            byLength = new int[longest + 1][];
            for (int len = 0; len <= longest; len++) {
                byLength[len] = new int[counts[len]];
                counts[len] = 0;
            }
            for (int i = 0; i < names.length; i++) {
                int len = names[i].length();
                byLength[len][counts[len]++] = i;
            }
        }

        /** The index of the property named by {@code text[start, end)}, or -1. */
        int find(String text, int start, int end) {
            int len = end - start;
            if (len >= byLength.length) {
                return -1;
            }
            for (int k : byLength[len]) {
                if (text.regionMatches(start, names[k], 0, len)) {
                    return k;
                }
            }
            return -1;
        }
    }

    private transient volatile Spec last;

    private Spec spec(String spec) {
        Spec s = last;
        if (s == null || !s.text.equals(spec)) {
            s = new Spec(spec);
            last = s;
        }
        return s;
    }

    @Override
    public Long call(String text, String spec) {
        if (text == null || spec == null) {
            return -1L;
        }
        try {
            return new Scanner(text, spec(spec), null).document();
        } catch (Reject | StringIndexOutOfBoundsException e) {
            return -1L;
        }
    }

    /**
     * The undeclared top-level properties of a plain document, as {@code "name"} U+0000 value
     * text, separated by U+0001; null where there are none or the document is not plain.
     */
    String undeclared(String text, String spec) {
        if (text == null || spec == null) {
            return null;
        }
        StringBuilder out = new StringBuilder();
        try {
            new Scanner(text, spec(spec), out).document();
        } catch (Reject | StringIndexOutOfBoundsException e) {
            return null;
        }
        return out.length() == 0 ? null : out.toString();
    }

    /** Thrown (without a stack trace) where the text is not provably plain. */
    private static final class Reject extends RuntimeException {
        private static final long serialVersionUID = 1L;
        static final Reject INSTANCE = new Reject();

        private Reject() {
            super(null, null, false, false);
        }
    }

    private static final class Scanner {
        private final String s;
        private final int n;
        private final Spec spec;
        private final StringBuilder undeclared;  // where the undeclared properties' text goes, or null
        private HashSet<String> undeclaredNames;
        private boolean undeclaredSeen;  // some undeclared property or carried member
        private int i;

        Scanner(String s, Spec spec, StringBuilder undeclared) {
            this.s = s;
            this.n = s.length();
            this.spec = spec;
            this.undeclared = undeclared;
        }

        private static Reject reject() {
            return Reject.INSTANCE;
        }

        private void ws() {
            while (i < n) {
                char c = s.charAt(i);
                if (c == ' ' || c == '\n' || c == '\r' || c == '\t') {
                    i++;
                } else {
                    return;
                }
            }
        }

        private char peek() {
            if (i >= n) {
                throw reject();
            }
            return s.charAt(i);
        }

        private void expect(char c) {
            if (peek() != c) {
                throw reject();
            }
            i++;
        }

        /** Opens a container at {@code open}; true if an element follows, false if it is empty. */
        private boolean first(char open, char close) {
            expect(open);
            ws();
            if (peek() == close) {
                i++;
                return false;
            }
            return true;
        }

        /** After an element: true if another follows ({@code ,}), false at {@code close}. */
        private boolean more(char close) {
            ws();
            char c = peek();
            i++;
            if (c == close) {
                return false;
            }
            if (c != ',') {
                throw reject();
            }
            ws();
            return true;
        }

        private void colon() {
            ws();
            expect(':');
            ws();
        }

        long document() {
            ws();
            long count = 0;
            long nulls = 0;
            long[] seen = new long[(spec.kinds.length + 63) >>> 6];
            if (first('{', '}')) {
                do {
                    int start = i;
                    int k = name(spec);
                    if (k < 0) {
                        other(start);
                        continue;
                    }
                    if ((seen[k >>> 6] & (1L << k)) != 0) {
                        throw reject();  // a repeated property
                    }
                    seen[k >>> 6] |= 1L << k;
                    colon();
                    if (spec.nullBit[k] >= 0 && s.startsWith("null", i)) {
                        i += 4;
                        nulls |= 1L << spec.nullBit[k];
                        continue;
                    }
                    if (spec.kinds[k] == 'o') {
                        object(spec.members[k], k);
                    } else if (spec.kinds[k] == 'l') {
                        if (first('[', ']')) {
                            do {
                                object(spec.members[k], k);
                            } while (more(']'));
                        }
                    } else {
                        value(spec.kinds[k], spec.types[k]);
                    }
                    count++;
                } while (more('}'));
            }
            ws();  // JSON whitespace may follow the document (Jackson and Python both allow it)
            if (i != n) {
                throw reject();  // anything else after the document
            }
            return count | nulls | (undeclaredSeen ? UNDECLARED : 0L);
        }

        /** An undeclared property named at {@code start}, its value any JSON value (an open spec only). */
        private void other(int start) {
            if (!spec.open) {
                throw reject();
            }
            String name = s.substring(start, i);
            if (undeclaredNames == null) {
                undeclaredNames = new HashSet<>();
            }
            if (!undeclaredNames.add(name)) {
                throw reject();  // a repeated property
            }
            colon();
            int at = i;
            any(0, true);
            give(null, name, at);
        }

        /** The text of an undeclared member named {@code name} whose value starts at {@code at}. */
        private void give(String prefix, String name, int at) {
            undeclaredSeen = true;
            if (undeclared != null) {
                if (undeclared.length() > 0) {
                    undeclared.append('\u0001');
                }
                if (prefix != null) {
                    undeclared.append(prefix);
                }
                undeclared.append(name).append('\u0000').append(s, at, i);
            }
        }

        /** The index of the property of {@code in} named here (a name without escapes), or -1. */
        private int name(Spec in) {
            expect('"');
            int start = i;
            while (true) {
                char c = peek();
                if (c == '"') {
                    break;
                }
                if (c == '\\' || c < 0x20) {
                    throw reject();
                }
                i++;
            }
            int k = in.find(s, start, i);
            i++;
            return k;
        }

        /**
         * An object of declared scalar members, each at most once, the required ones ({@code q})
         * present; where its members' spec is open (an object picked whole, of an open schema),
         * undeclared members too, each once, of any value.
         */
        private void object(Spec members, int field) {
            long[] seen = new long[(members.kinds.length + 63) >>> 6];
            HashSet<String> others = null;
            if (first('{', '}')) {
                do {
                    int start = i;
                    int k = name(members);
                    int nameEnd = i;
                    if (k < 0 && members.open) {
                        if (others == null) {
                            others = new HashSet<>();
                        }
                        String name = s.substring(start, i);
                        if (!others.add(name)) {
                            throw reject();  // repeated
                        }
                        colon();
                        int at = i;
                        any(0, true);
                        if (members.carried) {
                            give(field + "\u0002", name, at);
                        }
                        continue;
                    }
                    if (k < 0 || (seen[k >>> 6] & (1L << k)) != 0) {
                        throw reject();  // undeclared, or repeated
                    }
                    seen[k >>> 6] |= 1L << k;
                    colon();
                    char kind = members.kinds[k];
                    if (kind == 'c' || kind == 'k') {  // carried as written: given back, as an undeclared member is
                        String name = s.substring(start, nameEnd);
                        int at = i;
                        carried(members.types[k], members.members[k]);
                        give(field + "\u0002", name, at);
                        continue;
                    }
                    char type = members.types[k];
                    if (type == 'S' || type == 'I' || type == 'N' || type == 'B') {  // an array appended or unioned
                        carried(type, null);
                    } else if (type == 'M') {  // a merged object: its declared members only
                        object(members.members[k], -1);
                    } else {
                        memberScalar(type);
                    }
                } while (more('}'));
            }
            for (int k = 0; k < members.kinds.length; k++) {
                if ((members.kinds[k] == 'q' || members.kinds[k] == 'k') && (seen[k >>> 6] & (1L << k)) == 0) {
                    throw reject();  // a required member is missing
                }
            }
        }

        /**
         * A member carried as written (kind {@code c} / {@code k}): {@code o} an object, {@code a}
         * an array (of any values, numbers as Python reads them); {@code S} / {@code I} /
         * {@code N} / {@code B} an array of that scalar type; else {@code null} or the scalar
         * ({@code d}: a date-time).
         */
        private void carried(char type, Spec members) {
            switch (type) {
                case 'O':
                    object(members, -1);
                    return;
                case 'L':
                    if (first('[', ']')) {
                        do {
                            object(members, -1);
                        } while (more(']'));
                    }
                    return;
                case 'o':
                case 'a':
                    if (peek() != (type == 'o' ? '{' : '[')) {
                        throw reject();
                    }
                    any(0, true);
                    return;
                case 'S':
                case 'I':
                case 'N':
                case 'B':
                    if (first('[', ']')) {
                        do {
                            memberScalar(Character.toLowerCase(type));
                        } while (more(']'));
                    }
                    return;
                default:
                    if (s.startsWith("null", i)) {
                        i += 4;
                        return;
                    }
                    memberScalar(type);
            }
        }

        /**
         * An object's member scalar (nothing reads it typed; it is kept as written): an integer's
         * text, a number Python reads as written (Spark would read 1e400 as Infinity), else the type.
         */
        private void memberScalar(char type) {
            if (type == 'i') {
                integer();
            } else if (type == 'n') {
                exactNumber();
            } else {
                scalar(type);
            }
        }

        private void value(char kind, char type) {
            switch (kind) {
                case 's':
                case 'z':
                    scalar(type);
                    return;
                case 'r':
                    if (peek() != (type == 'o' ? '{' : '[')) {
                        throw reject();
                    }
                    any(0, false);
                    return;
                case 'a':
                    if (first('[', ']')) {
                        do {
                            scalar(type);
                        } while (more(']'));
                    }
                    return;
                case 'm':
                    if (first('{', '}')) {
                        HashSet<String> keys = new HashSet<>();
                        do {
                            int start = i;
                            string();
                            if (!keys.add(s.substring(start, i))) {
                                throw reject();  // a repeated key (compared as written)
                            }
                            colon();
                            scalar(type);
                        } while (more('}'));
                    }
                    return;
                default:
                    throw reject();
            }
        }

        private void scalar(char type) {
            switch (type) {
                case 's':
                    string();
                    return;
                case 'i':
                case 'n':
                    number();
                    return;
                case 'd':
                case 'D':
                    dateTime(type == 'D');
                    return;
                case 'b':
                    if (s.startsWith("true", i)) {
                        i += 4;
                    } else if (s.startsWith("false", i)) {
                        i += 5;
                    } else {
                        throw reject();
                    }
                    return;
                default:
                    throw reject();
            }
        }

        /**
         * A JSON string holding an RFC 3339 date-time as {@code tidemark.collection.formats}
         * reads one (its grammar and ranges; a leap second is not proved, nor an escape in the
         * text), with at most {@link #FRACTION_DIGITS} digits of fraction where {@code bounded}
         * (a date-time the combine orders by its instant).
         */
        private void dateTime(boolean bounded) {
            expect('"');
            int year = digits(4);
            expect('-');
            int month = digits(2);
            expect('-');
            int day = digits(2);
            char t = peek();
            if (t != 'T' && t != 't') {
                throw reject();
            }
            i++;
            int hour = digits(2);
            expect(':');
            int minute = digits(2);
            expect(':');
            int second = digits(2);
            if (peek() == '.') {
                i++;
                int start = i;
                while (i < n && s.charAt(i) >= '0' && s.charAt(i) <= '9') {
                    i++;
                }
                if (i == start || (bounded && i - start > FRACTION_DIGITS)) {
                    throw reject();
                }
            }
            char z = peek();
            i++;
            if (z == '+' || z == '-') {
                int offsetHour = digits(2);
                expect(':');
                int offsetMinute = digits(2);
                if (offsetHour > 23 || offsetMinute > 59) {
                    throw reject();
                }
            } else if (z != 'Z' && z != 'z') {
                throw reject();
            }
            expect('"');
            if (month < 1 || month > 12 || day < 1 || day > daysIn(year, month)) {
                throw reject();
            }
            if (hour > 23 || minute > 59 || second > 59) {
                throw reject();
            }
        }

        /** {@code count} ASCII digits as a number. */
        private int digits(int count) {
            int v = 0;
            for (int k = 0; k < count; k++) {
                char c = peek();
                if (c < '0' || c > '9') {
                    throw reject();
                }
                v = v * 10 + (c - '0');
                i++;
            }
            return v;
        }

        private static int daysIn(int year, int month) {
            if (month == 2) {
                boolean leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
                return leap ? 29 : 28;
            }
            return month == 4 || month == 6 || month == 9 || month == 11 ? 30 : 31;
        }

        /** Any JSON value, null only where {@code nulls} (raw properties: none), nested at most MAX_DEPTH deep. */
        private void any(int depth, boolean nulls) {
            if (depth > MAX_DEPTH) {
                throw reject();
            }
            char c = peek();
            if (c == '"') {
                string();
            } else if (c == '{') {
                if (first('{', '}')) {
                    do {
                        string();
                        colon();
                        any(depth + 1, nulls);
                    } while (more('}'));
                }
            } else if (c == '[') {
                if (first('[', ']')) {
                    do {
                        any(depth + 1, nulls);
                    } while (more(']'));
                }
            } else if (c == 't' || c == 'f') {
                scalar('b');
            } else if (nulls && s.startsWith("null", i)) {
                i += 4;
            } else {
                exactNumber();
            }
        }

        /**
         * A number kept as JSON text (raw and undeclared values), only where its value is what
         * Python reads: an integer of any length, or a fraction or exponent of at most 15
         * significant digits within 1e-300 .. 1e300 (a double holds it exactly as written;
         * {@code 1e400} is not finite to Python, and 20 digits would be rounded).
         */
        private void exactNumber() {
            int start = i;
            number();
            int end = i;
            int e = end;
            for (int k = start; k < end; k++) {
                char c = s.charAt(k);
                if (c == 'e' || c == 'E') {
                    e = k;
                    break;
                }
            }
            int dot = s.indexOf('.', start);
            if (e == end && (dot < 0 || dot >= end)) {
                return;  // an integer
            }
            int significant = 0;
            int leading = -1;  // the position of the first nonzero digit, counted over the digits
            int intDigits = 0;
            boolean inFraction = false;
            int position = 0;
            for (int k = start; k < e; k++) {
                char c = s.charAt(k);
                if (c == '.') {
                    inFraction = true;
                    continue;
                }
                if (c < '0' || c > '9') {
                    continue;
                }
                if (!inFraction) {
                    intDigits++;
                }
                if (leading < 0 && c != '0') {
                    leading = position;
                }
                if (leading >= 0) {
                    significant++;
                }
                position++;
            }
            if (leading < 0) {
                return;  // zero
            }
            // trailing zeros of a fraction are not significant
            for (int k = e - 1; k > start && s.charAt(k) == '0' && inFraction; k--) {
                significant--;
            }
            long exponent = 0;
            if (e < end) {
                int k = e + 1;
                boolean negative = s.charAt(k) == '-';
                if (s.charAt(k) == '-' || s.charAt(k) == '+') {
                    k++;
                }
                if (end - k > 6) {
                    throw reject();
                }
                exponent = Long.parseLong(s.substring(k, end));
                exponent = negative ? -exponent : exponent;
            }
            long magnitude = exponent + intDigits - leading - 1;  // the decimal exponent of the first digit
            if (significant > 15 || magnitude > 300 || magnitude < -300) {
                throw reject();
            }
        }

        /** A JSON string: no raw control character, no unpaired surrogate escape. */
        private void string() {
            expect('"');
            while (true) {
                char c = peek();
                i++;
                if (c == '"') {
                    return;
                }
                if (c < 0x20) {
                    throw reject();
                }
                if (c == '\\') {
                    char e = peek();
                    i++;
                    if (e == 'u') {
                        int u = hex4();
                        if (u >= 0xD800 && u <= 0xDBFF) {
                            if (!s.startsWith("\\u", i)) {
                                throw reject();
                            }
                            i += 2;
                            int low = hex4();
                            if (low < 0xDC00 || low > 0xDFFF) {
                                throw reject();
                            }
                        } else if (u >= 0xDC00 && u <= 0xDFFF) {
                            throw reject();
                        }
                    } else if ("\"\\/bfnrt".indexOf(e) < 0) {
                        throw reject();
                    }
                } else if (Character.isSurrogate(c)) {
                    // a raw surrogate must be half of a pair (a supplementary character)
                    if (!Character.isHighSurrogate(c) || i >= n || !Character.isLowSurrogate(s.charAt(i))) {
                        throw reject();
                    }
                    i++;
                }
            }
        }

        private int hex4() {
            if (i + 4 > n) {
                throw reject();
            }
            int v = 0;
            for (int k = 0; k < 4; k++) {
                char h = s.charAt(i + k);
                int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10
                        : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
                if (d < 0) {
                    throw reject();
                }
                v = (v << 4) | d;
            }
            i += 4;
            return v;
        }

        /** A JSON number: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)? */
        private void number() {
            if (peek() == '-') {
                i++;
            }
            char c = peek();
            if (c == '0') {
                i++;
            } else if (c >= '1' && c <= '9') {
                digits();
            } else {
                throw reject();
            }
            if (i < n && s.charAt(i) == '.') {
                i++;
                if (!isDigit(peek())) {
                    throw reject();
                }
                digits();
            }
            if (i < n && (s.charAt(i) == 'e' || s.charAt(i) == 'E')) {
                i++;
                char sign = peek();
                if (sign == '+' || sign == '-') {
                    i++;
                }
                if (!isDigit(peek())) {
                    throw reject();
                }
                digits();
            }
        }

        /** An integer within a long's 18 digits: no fraction, no exponent. */
        private void integer() {
            if (peek() == '-') {
                i++;
            }
            int start = i;
            char c = peek();
            if (c == '0') {
                i++;
            } else if (c >= '1' && c <= '9') {
                digits();
            } else {
                throw reject();
            }
            if (i - start > 18 || (i < n && (s.charAt(i) == '.' || s.charAt(i) == 'e' || s.charAt(i) == 'E'))) {
                throw reject();
            }
        }

        private void digits() {
            while (i < n && isDigit(s.charAt(i))) {
                i++;
            }
        }

        private static boolean isDigit(char c) {
            return c >= '0' && c <= '9';
        }
    }
}
