// The C interface of tokenizer/spm.h over sentencepiece::SentencePieceProcessor.
#include "tokenizer/spm.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <new>
#include <string>
#include <vector>

#include <sentencepiece_processor.h>

struct tgc_spm {
    sentencepiece::SentencePieceProcessor sp;
};

static void say(char *why, size_t cap, const char *what)
{
    if (cap) std::snprintf(why, cap, "%s", what);
}

extern "C" tgc_spm *tgc_spm_load(const char *bytes, size_t n, char *why, size_t cap)
{
    try {
        tgc_spm *m = new tgc_spm;
        auto st = m->sp.LoadFromSerializedProto(absl::string_view(bytes, n));
        if (!st.ok()) {
            say(why, cap, st.ToString().c_str());
            delete m;
            return nullptr;
        }
        return m;
    } catch (const std::exception &e) {
        say(why, cap, e.what());
    } catch (...) {
        say(why, cap, "an unknown C++ exception in libsentencepiece");
    }
    return nullptr;
}

extern "C" void tgc_spm_free(tgc_spm *m) { delete m; }

extern "C" int64_t tgc_spm_size(const tgc_spm *m) { return m->sp.GetPieceSize(); }

extern "C" int64_t tgc_spm_eos(const tgc_spm *m)
{
    int id = m->sp.eos_id();
    return id >= 0 && id < m->sp.GetPieceSize() ? id : -1;
}

static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

// The end of the run without white space that starts at text[i], looking
// at most max + 1 bytes ahead (so a long run costs max + 1, not its length).
static size_t run_end(const char *text, size_t n, size_t i, size_t max)
{
    size_t stop = n - i > max + 1 ? i + max + 1 : n;
    while (i < stop && !is_space(text[i])) i++;
    return i;
}

extern "C" size_t tgc_spm_piece(const char *text, size_t n, size_t i, size_t max)
{
    size_t j = i;
    if (!is_space(text[i]) && run_end(text, n, i, max) - i > max) { // inside a long run: a cut of it
        j = i + max;
        while (j > i + 1 && (static_cast<unsigned char>(text[j]) & 0xC0) == 0x80) j--; // not inside a character
        return j - i;
    }
    while (j < n) { // up to the next long run, or the end
        size_t e = is_space(text[j]) ? j + 1 : run_end(text, n, j, max);
        if (!is_space(text[j]) && e - j > max) break;
        j = e;
    }
    return j - i;
}

// The ids of one piece appended to ids.
static bool encode_piece(const tgc_spm *m, const char *text, size_t n, std::vector<int> &ids, char *why, size_t whycap)
{
    std::vector<int> part;
    auto st = m->sp.Encode(absl::string_view(text, n), &part);
    if (!st.ok()) {
        say(why, whycap, st.ToString().c_str());
        return false;
    }
    ids.insert(ids.end(), part.begin(), part.end());
    return true;
}

extern "C" bool tgc_spm_encode(const tgc_spm *m, const char *text, size_t n, int32_t **out, int64_t *len,
                               int64_t *cap, char *why, size_t whycap)
{
    try {
        std::vector<int> ids;
        for (size_t i = 0; i < n;) { // one piece (the whole text) unless it has a long run
            size_t k = tgc_spm_piece(text, n, i, TGC_SPM_MAX_RUN);
            if (!encode_piece(m, text + i, k, ids, why, whycap)) return false;
            i += k;
        }
        if (*len + (int64_t)ids.size() > *cap) {
            int64_t want = *cap ? *cap : 1024;
            while (want < *len + (int64_t)ids.size()) want *= 2;
            void *p = std::realloc(*out, (size_t)want * sizeof **out);
            if (!p) throw std::bad_alloc();
            *out = static_cast<int32_t *>(p);
            *cap = want;
        }
        for (int id : ids) (*out)[(*len)++] = id;
        return true;
    } catch (const std::exception &e) {
        say(why, whycap, e.what());
    } catch (...) {
        say(why, whycap, "an unknown C++ exception in libsentencepiece");
    }
    return false;
}

extern "C" bool tgc_spm_decode(const tgc_spm *m, const int32_t *ids, int64_t n, char **text, size_t *len, char *why,
                               size_t whycap)
{
    *text = nullptr;
    *len = 0;
    try {
        std::vector<int> v(ids, ids + n);
        std::string s;
        auto st = m->sp.Decode(v, &s);
        if (!st.ok()) {
            say(why, whycap, st.ToString().c_str());
            return false;
        }
        char *p = static_cast<char *>(std::malloc(s.size() + 1));
        if (!p) throw std::bad_alloc();
        std::memcpy(p, s.data(), s.size());
        p[s.size()] = 0;
        *text = p;
        *len = s.size();
        return true;
    } catch (const std::exception &e) {
        say(why, whycap, e.what());
    } catch (...) {
        say(why, whycap, "an unknown C++ exception in libsentencepiece");
    }
    return false;
}
