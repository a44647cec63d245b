#ifndef PARLEY_COPENSSL_SHIM_H
#define PARLEY_COPENSSL_SHIM_H
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/hmac.h>
#include <openssl/pkcs12.h>
#include <openssl/x509.h>
#include <openssl/pem.h>
#include <openssl/bio.h>
#include <string.h>

/* EVP_CIPHER_CTX_ctrl takes a void * for the tag; typed wrappers keep Swift honest. */
static inline int c_parley_gcm_set_ivlen(EVP_CIPHER_CTX *c, int len) {
    return EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_IVLEN, len, NULL);
}
static inline int c_parley_gcm_get_tag(EVP_CIPHER_CTX *c, unsigned char *tag, int len) {
    return EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_GET_TAG, len, tag);
}
static inline int c_parley_gcm_set_tag(EVP_CIPHER_CTX *c, const unsigned char *tag, int len) {
    return EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_TAG, len, (void *)tag);
}

/* ---- Client certificates (PKCS#12 in, PEM out) ----
   A PKCS#12 file names its own key-derivation work (iteration counts), so a hostile
   upload could make one parse take minutes. These helpers read every count before any
   derivation runs and refuse files that ask for more than the caller allows. */

/* The iteration count a PBE algorithm asks for (PKCS#12 PBE or PBES2 with PBKDF2);
   -1 for anything else (scrypt, unknown), which the caller refuses. */
static inline long c_parley_pbe_iterations(const X509_ALGOR *alg) {
    const ASN1_OBJECT *oid = NULL; int ptype = 0; const void *pval = NULL;
    X509_ALGOR_get0(&oid, &ptype, &pval, alg);
    if (ptype != V_ASN1_SEQUENCE || pval == NULL) return -1;
    long iter = -1;
    if (OBJ_obj2nid(oid) == NID_pbes2) {
        PBE2PARAM *p2 = ASN1_item_unpack((const ASN1_STRING *)pval, ASN1_ITEM_rptr(PBE2PARAM));
        if (p2 == NULL) return -1;
        const ASN1_OBJECT *koid = NULL; int ktype = 0; const void *kval = NULL;
        X509_ALGOR_get0(&koid, &ktype, &kval, p2->keyfunc);
        if (OBJ_obj2nid(koid) == NID_id_pbkdf2 && ktype == V_ASN1_SEQUENCE && kval != NULL) {
            PBKDF2PARAM *kdf = ASN1_item_unpack((const ASN1_STRING *)kval, ASN1_ITEM_rptr(PBKDF2PARAM));
            if (kdf != NULL) { iter = ASN1_INTEGER_get(kdf->iter); PBKDF2PARAM_free(kdf); }
        }
        PBE2PARAM_free(p2);
        return iter;
    }
    PBEPARAM *p = ASN1_item_unpack((const ASN1_STRING *)pval, ASN1_ITEM_rptr(PBEPARAM));
    if (p == NULL) return -1;
    iter = ASN1_INTEGER_get(p->iter);
    PBEPARAM_free(p);
    return iter;
}

/* Checks the shrouded-key bags of one safe; 0 when every count is within max_iter. */
static inline int c_parley_p12_bags_ok(const STACK_OF(PKCS12_SAFEBAG) *bags, long max_iter) {
    if (sk_PKCS12_SAFEBAG_num(bags) > 64) return 0;
    for (int j = 0; j < sk_PKCS12_SAFEBAG_num(bags); j++) {
        const PKCS12_SAFEBAG *bag = sk_PKCS12_SAFEBAG_value(bags, j);
        if (PKCS12_SAFEBAG_get_nid(bag) != NID_pkcs8ShroudedKeyBag) continue;
        const X509_SIG *sig = PKCS12_SAFEBAG_get0_pkcs8(bag);
        const X509_ALGOR *alg = NULL;
        if (sig == NULL) return 0;
        X509_SIG_get0(sig, &alg, NULL);
        long it = alg ? c_parley_pbe_iterations(alg) : -1;
        if (it < 1 || it > max_iter) return 0;
    }
    return 1;
}

/* Opens a DER PKCS#12 and writes its certificate (then its chain) and its private key
   (unencrypted PKCS#8) as PEM into the two memory BIOs.
   0 ok; 1 not PKCS#12; 2 asks for more key-derivation work than max_iter (or in a form
   that cannot be bounded); 3 wrong password; 4 no key or no certificate; 5 the key does
   not belong to the certificate; 6 the certificate is expired or not yet valid. */
static inline int c_parley_pkcs12_to_pem(const unsigned char *der, long len, const char *pass, long max_iter,
                                         BIO *cert_out, BIO *key_out) {
    const unsigned char *cursor = der;
    PKCS12 *p12 = d2i_PKCS12(NULL, &cursor, len);
    if (p12 == NULL) return 1;
    int passlen = pass ? (int)strlen(pass) : 0;
    int result = 0;
    STACK_OF(PKCS7) *safes = NULL;
    EVP_PKEY *key = NULL; X509 *cert = NULL; STACK_OF(X509) *chain = NULL;

    if (PKCS12_mac_present(p12)) {
        const ASN1_INTEGER *iter = NULL;
        PKCS12_get0_mac(NULL, NULL, NULL, &iter, p12);
        long it = iter ? ASN1_INTEGER_get(iter) : 1;
        if (it < 1 || it > max_iter) { result = 2; goto done; }
        if (!PKCS12_verify_mac(p12, pass, passlen)) { result = 3; goto done; }
    }
    safes = PKCS12_unpack_authsafes(p12);
    if (safes == NULL) { result = 1; goto done; }
    if (sk_PKCS7_num(safes) > 16) { result = 2; goto done; }
    for (int i = 0; i < sk_PKCS7_num(safes); i++) {
        PKCS7 *p7 = sk_PKCS7_value(safes, i);
        STACK_OF(PKCS12_SAFEBAG) *bags = NULL;
        int nid = OBJ_obj2nid(p7->type);
        if (nid == NID_pkcs7_data) {
            bags = PKCS12_unpack_p7data(p7);
        } else if (nid == NID_pkcs7_encrypted) {
            if (p7->d.encrypted == NULL || p7->d.encrypted->enc_data == NULL) { result = 1; goto done; }
            long it = c_parley_pbe_iterations(p7->d.encrypted->enc_data->algorithm);
            if (it < 1 || it > max_iter) { result = 2; goto done; }
            bags = PKCS12_unpack_p7encdata(p7, pass, passlen);
            if (bags == NULL) { result = 3; goto done; }
        } else {
            result = 1; goto done;
        }
        if (bags == NULL) { result = 1; goto done; }
        int ok = c_parley_p12_bags_ok(bags, max_iter);
        sk_PKCS12_SAFEBAG_pop_free(bags, PKCS12_SAFEBAG_free);
        if (!ok) { result = 2; goto done; }
    }
    if (!PKCS12_parse(p12, pass, &key, &cert, &chain)) { result = 3; goto done; }
    if (key == NULL || cert == NULL) { result = 4; goto done; }
    if (!X509_check_private_key(cert, key)) { result = 5; goto done; }
    if (X509_cmp_current_time(X509_get0_notAfter(cert)) <= 0 || X509_cmp_current_time(X509_get0_notBefore(cert)) >= 0) {
        result = 6; goto done;
    }
    if (!PEM_write_bio_X509(cert_out, cert)) { result = 1; goto done; }
    for (int i = 0; chain != NULL && i < sk_X509_num(chain); i++) {
        if (!PEM_write_bio_X509(cert_out, sk_X509_value(chain, i))) { result = 1; goto done; }
    }
    if (!PEM_write_bio_PKCS8PrivateKey(key_out, key, NULL, NULL, 0, NULL, NULL)) { result = 1; goto done; }
done:
    if (safes) sk_PKCS7_pop_free(safes, PKCS7_free);
    EVP_PKEY_free(key);
    X509_free(cert);
    if (chain) sk_X509_pop_free(chain, X509_free);
    PKCS12_free(p12);
    ERR_clear_error();
    return result;
}

/* ---- Trusted signing certificates (an identity provider's, PEM) ----
   What one PEM text holds: 1 an RSA key, 2 an EC key, 3 another key type, in exactly one
   X.509 certificate; 0 no certificate; 4 more than one. */
static inline int c_parley_pem_certificate_key(const char *pem, int len) {
    BIO *bio = BIO_new_mem_buf(pem, len);
    if (bio == NULL) return 0;
    int result = 0;
    X509 *cert = PEM_read_bio_X509(bio, NULL, NULL, NULL);
    if (cert != NULL) {
        X509 *second = PEM_read_bio_X509(bio, NULL, NULL, NULL);
        if (second != NULL) {
            X509_free(second);
            result = 4;
        } else {
            EVP_PKEY *key = X509_get0_pubkey(cert);
            int type = key != NULL ? EVP_PKEY_get_base_id(key) : 0;
            result = type == EVP_PKEY_RSA ? 1 : type == EVP_PKEY_EC ? 2 : 3;
        }
        X509_free(cert);
    }
    BIO_free(bio);
    ERR_clear_error();
    return result;
}

/* BIO_get_mem_data is a macro. */
static inline long c_parley_bio_mem_data(BIO *bio, char **data) { return BIO_get_mem_data(bio, data); }
#endif
